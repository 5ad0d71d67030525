"""transport/sockets.py's receiving, on real ZeroMQ sockets (inproc), and the hub's metric
children looked up once (metrics.Labelled)."""

from __future__ import annotations

import time

import pytest
import zmq
from prometheus_client import CollectorRegistry, Counter

from binlogsync.metrics import Labelled
from binlogsync.transport import sockets


@pytest.fixture
def pair():
    context = zmq.Context()
    router, dealer = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    router.bind("inproc://sockets-test")
    dealer.connect("inproc://sockets-test")
    yield router, dealer
    router.close(linger=0)
    dealer.close(linger=0)
    context.term()


def _wait_readable(sock: zmq.Socket, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not sockets.waiting(sock):
        assert time.monotonic() < deadline, "the message never arrived"
        sock.poll(50)


def test_each_waiting_message_comes_whole_and_in_order(pair):
    router, dealer = pair
    big = bytes(range(256)) * 8192  # 2 MiB: a frame libzmq hands over without a copy
    messages = [[b"BLS1", b"BATCH", b"header-1", big], [b"BLS1", b"PING", b"{}"], [b"x"]]
    for message in messages:
        dealer.send_multipart(message)
    _wait_readable(router)
    got = []
    while sockets.waiting(router):
        got.append(sockets.receive_bytes(router))
    identity = got[0][0]
    assert [parts[0] for parts in got] == [identity] * 3  # the ROUTER's routing id first
    assert [parts[1:] for parts in got] == messages
    assert all(type(part) is bytes for parts in got for part in parts)
    with pytest.raises(zmq.Again):
        sockets.receive(router)


def test_frames_say_what_the_message_carried(pair):
    router, dealer = pair
    dealer.send_multipart([b"one", b"two"])
    _wait_readable(router)
    parts = sockets.receive(router)
    assert [type(p) for p in parts] == [zmq.Frame] * 3
    assert [p.bytes for p in parts[1:]] == [b"one", b"two"]
    assert not sockets.waiting(router)


def test_a_labelled_child_is_looked_up_once_and_counts():
    registry = CollectorRegistry()
    counter = Counter("things", "things counted", ["target", "origin"], registry=registry)
    by_pair = Labelled(counter)
    by_pair("t1", "o1").inc(2)
    by_pair("t1", "o1").inc(3)
    by_pair("t2", "o1").inc()
    assert by_pair("t1", "o1") is by_pair("t1", "o1")
    sample = registry.get_sample_value
    assert sample("things_total", {"target": "t1", "origin": "o1"}) == 5
    assert sample("things_total", {"target": "t2", "origin": "o1"}) == 1
