"""A private Docker engine and locally made Debian images, for the deployment tests (Ansible
against systemd containers, the docker compose site) on a machine without an image registry.

    Engine       dockerd started by hand (no systemd on the host), on its own socket, data and
                 exec roots, with no bridge and no iptables rules: containers talk over the
                 user-defined networks compose or the tests make. `start` removes what a killed
                 session left on its root; `stop` ends it and what it ran.
    kept_root    a data root kept from one session to the next (its images and build cache:
                 the compose images rebuild only what changed), held by one session at a time.
    debian_image local/NAME: Debian bookworm (minbase) plus packages, made with debootstrap from
                 the host's Debian mirror and imported; the root filesystem is cached as a
                 tarball keyed by the package list, so the next session imports it in seconds.
    wheelhouse   `pip wheel` of binlogsync and its dependencies: what hosts and images install
                 from, with no package index.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .localsite import wait_until

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("BINLOGSYNC_CACHE", Path.home() / ".cache" / "binlogsync"))
SUITE = "bookworm"
# Under /var/tmp: overlay2 needs a filesystem that is not itself an overlay, and the root
# outlives a reboot's /tmp clean-up.
KEPT_ROOTS = Path(os.environ.get("BINLOGSYNC_DOCKER_ROOTS", "/var/tmp/bls-docker-kept"))


def mirror() -> str:
    """The Debian mirror the host's apt uses (the only network this machine has)."""
    found: list[str] = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        found += re.findall(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M)
        found += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s+\S+", text, re.M)
    return found[0] if found else "http://deb.debian.org/debian"


class Engine:
    """A private dockerd. `root` holds its data (images, containers); its socket and exec root
    live in a short folder of their own (unix socket paths are limited to 108 bytes)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_dir = Path(tempfile.mkdtemp(prefix="bls-dk-"))
        self.sock = self.run_dir / "docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.sock}"}

    def start(self, timeout: float = 60.0) -> None:
        if shutil.which("dockerd") is None:
            raise RuntimeError("dockerd is missing: apt-get install docker.io")
        self.root.mkdir(parents=True, exist_ok=True)
        self._end_leftover()
        log = (self.root / "dockerd.log").open("wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none",
             "--data-root", str(self.root / "data"), "--exec-root", str(self.run_dir / "exec"),
             "-H", f"unix://{self.sock}", "--pidfile", str(self.root / "dockerd.pid")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

        def answering() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited; see {self.root / 'dockerd.log'}")
            return self.docker("info", check=False).returncode == 0

        wait_until(answering, timeout, 0.2, "the private dockerd answering")
        self.clear()  # what a session killed on a kept root left behind

    def _end_leftover(self) -> None:
        """End a dockerd left on this root by a session killed before its clean-up (the root's
        lock died with that session; two dockerds must never share a root)."""
        try:
            pid = int((self.root / "dockerd.pid").read_text())
            command = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):
            return
        if command != "dockerd":
            return
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, 0.2, "the leftover dockerd's end")

    def docker(
        self, *args: str, check: bool = True, timeout: float = 600, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run(
            ["docker", *args], env=self.env, capture_output=True, timeout=timeout, input=input
        )
        if check and done.returncode:
            raise RuntimeError(
                f"docker {' '.join(args)} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace')[-3000:]}"
            )
        return done

    def clear(self) -> None:
        """Remove every container, network and volume (what a kept root may still hold from a
        session that was killed); images stay."""
        ids = self.docker("ps", "-aq", check=False).stdout.decode().split()
        if ids:
            self.docker("rm", "-f", *ids, check=False, timeout=120)
        self.docker("network", "prune", "-f", check=False, timeout=120)
        self.docker("volume", "prune", "-f", check=False, timeout=120)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.clear()
        # Untagged images a week old: what rebuilds replaced, so a kept root does not grow
        # forever. Not younger ones: the last layer of a build stage (the venvs' installs) is
        # untagged too, and it is the cache the next build wants.
        self.docker("image", "prune", "-f", "--filter", "until=168h", check=False, timeout=300)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None
        _unmount_under(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _unmount_under(path: Path) -> None:
    """Unmount what is mounted below `path`, deepest first: dockerd can exit with its exec
    root's network namespace still mounted (an nsfs at exec/netns/default), which neither
    rmtree nor anyone after removes."""
    prefix = f"{path}/"
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False, timeout=30)


@contextlib.contextmanager
def kept_root(name: str, roots: Path = KEPT_ROOTS) -> Iterator[Path | None]:
    """The data root `name` kept across sessions, locked for this one; None while another
    session holds it (the caller then uses a root of its own: two dockerds must never share
    one)."""
    roots.mkdir(parents=True, exist_ok=True)
    with (roots / f"{name}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield roots / name


def debian_image(engine: Engine, tag: str, packages: list[str], cache: Path = CACHE) -> str:
    """`tag` in `engine`: Debian minbase with `packages`, made once and cached."""
    key = hashlib.sha256(" ".join(sorted(packages)).encode()).hexdigest()[:12]
    marker = f"BINLOGSYNC_BASE={key}"  # a kept root may hold the tag made of other packages
    found = engine.docker("image", "inspect", "-f", "{{json .Config.Env}}", tag, check=False)
    if found.returncode == 0 and marker in found.stdout.decode():
        return tag
    tarball = cache / "images" / f"{SUITE}-{key}.tar"
    if not tarball.exists():
        _debootstrap(packages, tarball)
    with tarball.open("rb") as data:
        done = subprocess.run(
            ["docker", "import", "-c", 'CMD ["/bin/bash"]', "-c", f"ENV {marker}", "-", tag],
            env=engine.env, stdin=data, capture_output=True, timeout=600,
        )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"docker import failed: {done.stderr.decode(errors='replace')}")
    return tag


def _debootstrap(packages: list[str], tarball: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is missing: apt-get install debootstrap")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bls-rootfs-", dir=tarball.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE,
             str(rootfs), mirror()],
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"debootstrap failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        # Packaged services must not start while an image is built or a role installs them.
        (rootfs / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
        (rootfs / "usr/sbin/policy-rc.d").chmod(0o755)
        for cached in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            cached.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
        partial.replace(tarball)


def wheelhouse(dest: Path, extras: str = "", constraints: bool = True) -> Path:
    """Wheels of binlogsync (with `extras`, e.g. "[spark,airflow]") and everything it needs,
    built from this checkout: what a host with no package index installs from."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(dest), f"{ROOT}{extras}"]
    if constraints:
        command += ["-c", str(ROOT / "constraints.txt")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"pip wheel failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return dest
