"""Once per suite, the real thing: `airflow standalone` started over a live site (CURVE on, the
hub's binlog service with a native MariaDB replica subscribed, a target agent stopped while
Airflow starts so that the lag has a history, a reconciliation that finds two differing
rows), a DAG triggered over the REST API and waited for, the binlogsync page refused without
a login, and loaded in headless Chromium after logging in through Airflow's own form: the
numbers read from the rendered page (tables, the lag chart, the subscribers, the last
reconciliation's rows and its report) equal `binlogsync status --json --history` and the
state files; the report endpoint serves no other file. Then, in the same Airflow, a
`binlogsync` connection is added through the UI's connection form and its "Test" succeeds,
and one with a wrong hub key fails naming the problem. Screenshots of the page and of the
connection form are saved under the test's output (their paths printed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    NoSuchFrameException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from binlogsync_dev.airflow_site import Standalone, migrate, site_env
from binlogsync_dev.localsite import LocalSite
from binlogsync_dev.sandbox import Sandbox, Server, free_port
from servicekit import follow, service_site, stop_replica, wait_service
from sitekit import create, wait_equal

pytestmark = pytest.mark.airflow

CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1100",
)  # fmt: skip


class PageWait(WebDriverWait):  # type: ignore[type-arg]
    """A wait that, when it times out, says what the browser showed: its address, the page's
    text, the console's messages, and a screenshot (a bare TimeoutException says nothing).
    React redraws what it renders at will (a table refetched, a toast closing, the plugin's
    frame mounted again), so an element found a moment ago can be gone: the condition is
    asked again, as for an element not there yet (CI once failed on a stale element)."""

    def __init__(self, driver: webdriver.Chrome, timeout: float, shots: Path) -> None:
        super().__init__(
            driver,
            timeout,
            ignored_exceptions=(
                NoSuchElementException,
                NoSuchFrameException,
                StaleElementReferenceException,
            ),
        )
        self.browser = driver
        self.shots = shots

    def until(self, method: Any, message: str = "") -> Any:
        try:
            return super().until(method, message)
        except TimeoutException as e:
            raise AssertionError(self.shown()) from e

    def shown(self) -> str:
        try:
            self.shots.mkdir(parents=True, exist_ok=True)
            shot = self.shots / f"timeout-{time.monotonic_ns()}.png"
            self.browser.save_screenshot(str(shot))
            self.browser.switch_to.default_content()
            text = self.browser.find_element(By.TAG_NAME, "body").text
            console = [e["message"] for e in self.browser.get_log("browser")]
            return (
                f"timed out at {self.browser.current_url} (screenshot {shot})\n"
                f"page text: {text[:2000]!r}\nconsole: {console[-20:]}"
            )
        except WebDriverException as e:
            return f"timed out, and the browser could not say what it showed: {e}"


def _open_plugin_page(browser: webdriver.Chrome, url: str, tmp_path: Path) -> None:
    """Switch into the binlogsync page's frame in Airflow's UI at `url`, once the page in it
    has loaded. Once in CI (a62603a, a loaded machine) Airflow's single-page app never
    rendered the frame in 60 s, and nothing said why: a first try that times out prints what
    the browser showed and the page is loaded once more, as a user would reload it; a second
    timeout fails with what it showed. The frame is found and entered in one condition, and
    the page in it is waited for from the top again, so a frame React mounts anew on the way
    is not held stale."""

    def loaded(d: webdriver.Chrome) -> bool:
        d.switch_to.default_content()
        d.switch_to.frame(d.find_element(By.TAG_NAME, "iframe"))
        return bool(d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))

    for attempt in (1, 2):
        browser.get(url)
        try:
            PageWait(browser, 45, tmp_path / "shots").until(loaded)
            return
        except AssertionError as shown:
            if attempt == 2:
                raise
            print(f"the plugin page's frame did not come; loading it again. {shown}")
    raise AssertionError("unreachable")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def replica(sandbox: Sandbox) -> Server:
    return sandbox.start("page_replica", 88)


def _status_json(s: LocalSite, *extra: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "status", "--config",
         str(s.agents["hub"].config), "--json", *extra],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _cli(log: Path, *argv: str) -> subprocess.Popen[bytes]:
    """`binlogsync ARGV…` started, its output into `log` (a pipe nobody reads while Airflow
    starts could fill and stall it)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "binlogsync.cli", *argv], stdout=out, stderr=subprocess.STDOUT
        )


def _get(airflow: Standalone, path: str, token: str | None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(airflow.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, refused.read()


def _type(browser: webdriver.Chrome, field: Any, text: str) -> None:
    """Type `text` into a field of the form. Typed into this form, a path such as
    `…/test_standalone_runs_a_dag…` came out as `…runsa_dag…` (seen every run here), so when
    the keys do not give the text the value is set as React takes it (the native setter and
    an input event); either way the field must hold `text`."""
    field.send_keys(text)
    if field.get_attribute("value") != text:
        browser.execute_script(
            "const [el, v] = arguments;"
            "Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(el, v);"
            "el.dispatchEvent(new Event('input', {bubbles: true}));",
            field,
            text,
        )
    assert field.get_attribute("value") == text


def _add_connection(
    browser: webdriver.Chrome, wait: WebDriverWait, url: str, conn_id: str, port: int,
    secret: Path, hub_key: Path, shot: Path | None = None,
) -> None:  # fmt: skip
    """Add a `binlogsync` connection through the UI's form, as a person would. Every element
    is looked up when it is used, inside a wait, since the dialog's parts are redrawn as its
    type list and extra fields load."""
    browser.get(f"{url}/connections")
    add = (By.XPATH, "//button[normalize-space()='Add Connection']")
    wait.until(ec.element_to_be_clickable(add)).click()
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "[role=dialog]")))
    # The dialog opens animated and its type list loads from the API: wait until usable.
    conn_field = (By.CSS_SELECTOR, "[role=dialog] input[name=connection_id]")
    _type(browser, wait.until(ec.element_to_be_clickable(conn_field)), conn_id)
    kind = wait.until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, "[role=dialog] input[role=combobox]"))
    )
    kind.send_keys("binlogsync")
    wait.until(
        lambda d: d.find_elements(By.XPATH, "//*[@role='option'][contains(., 'binlogsync')]")
    )
    kind.send_keys(Keys.ENTER)
    wait.until(ec.visibility_of_element_located((By.NAME, "host"))).send_keys("127.0.0.1")
    in_dialog = "[role=dialog] "
    port_field = (By.CSS_SELECTOR, in_dialog + "input[name=port]")
    wait.until(ec.element_to_be_clickable(port_field)).send_keys(str(port))
    extra = (By.XPATH, "//*[@role='dialog']//button[normalize-space()='Extra Fields']")
    wait.until(ec.element_to_be_clickable(extra)).click()
    fields = {"element_secret_key_file": secret, "element_hub_public_key_file": hub_key}
    for name, value in fields.items():
        _type(browser, wait.until(ec.visibility_of_element_located((By.NAME, name))), str(value))
    element_name = (By.CSS_SELECTOR, in_dialog + "input[name=element_name]")
    assert wait.until(lambda d: d.find_element(*element_name).get_attribute("value")) == "airflow"
    if shot is not None:
        browser.save_screenshot(str(shot))
        print(f"screenshot of the connection form: {shot}")
    save = (By.XPATH, "//*[@role='dialog']//button[normalize-space()='Save']")
    wait.until(ec.element_to_be_clickable(save)).click()
    wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, "[role=dialog]")))
    row = f"//tr[td[@data-testid='table-cell-connection_id' and normalize-space()='{conn_id}']]"

    def cells(d: webdriver.Chrome) -> dict[str, str] | None:
        found = {
            str(c.get_attribute("data-testid")): c.text
            for c in d.find_elements(By.XPATH, f"{row}/td[@data-testid]")
        }
        return found or None

    shown = wait.until(cells)
    assert shown is not None
    assert shown["table-cell-conn_type"] == "binlogsync", shown
    assert shown["table-cell-host"] == "127.0.0.1" and shown["table-cell-port"] == str(port)


def _press_test(browser: webdriver.Chrome, wait: WebDriverWait, conn_id: str) -> tuple[str, str]:
    """Press the row's "Test Connection"; the type (success/error) and the text of the toast
    that answers it. Toasts close by themselves, so one seen a moment ago may be gone: they
    are read in one script each time, which no redraw splits."""
    toasts = "[data-scope=toast][data-part=root]"
    read = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(t => [t.id, t.dataset.type ?? null, t.innerText]);"
    )
    before = {t[0] for t in browser.execute_script(read, toasts)}
    row = f"//tr[td[@data-testid='table-cell-connection_id' and normalize-space()='{conn_id}']]"
    button = (By.XPATH, f"{row}//button[@aria-label='Test Connection']")
    wait.until(ec.element_to_be_clickable(button)).click()

    def answered(d: webdriver.Chrome) -> tuple[str, str] | None:
        for toast_id, kind, text in d.execute_script(read, toasts):
            if toast_id not in before and "Test Connection" in text:
                return str(kind), str(text)
        return None

    kind_text = wait.until(answered)
    assert kind_text is not None
    return kind_text


# The page redraws its tables every 5 s (innerHTML), so an element found in one draw is stale
# in the next: the test reads what one draw shows in a single script, which no redraw splits.
_READ_PAGE = """
const text = (el, sel) => el.querySelector(sel)?.innerText.trim() ?? null;
const rows = sel => [...document.querySelectorAll(sel)];
return {
  chart: rows('#lag-chart g[data-series]').map(g => [
    g.dataset.series, g.dataset.samples, g.querySelectorAll('circle').length,
    g.querySelector('polyline').getAttribute('points').trim().split(/\\s+/).length,
    text(document, `#lag-legend [data-series='${g.dataset.series}'] [data-field=last-lag]`)]),
  hosts: Object.fromEntries(rows('tr[data-host]').map(
    r => [r.dataset.host, text(r, '[data-field=online]')])),
  pairs: Object.fromEntries(rows('tr[data-pair]').map(r => [r.dataset.pair, {
    backlog: text(r, '[data-field=backlog]'), applied: text(r, '[data-field=applied]')}])),
  subscribers: Object.fromEntries(rows('tr[data-subscriber]').map(r => [r.dataset.subscriber, {
    position: text(r, '[data-field=position]'), text: r.innerText}])),
  jobs: Object.fromEntries(rows('tr[data-job]').map(r => [r.dataset.job, {
    result: text(r, '[data-field=result]'),
    report: r.querySelector('a[data-field=report]')?.href ?? null}])),
  rows: Object.fromEntries(rows('table[data-rows-of]').map(t => [t.dataset.rowsOf,
    rows(`table[data-rows-of='${t.dataset.rowsOf}'] tr[data-row]`).map(
      r => ['table', 'target', 'kind', 'key'].map(f => text(r, `[data-field=${f}]`)))])),
};
"""


def _page(browser: webdriver.Chrome) -> dict[str, Any]:
    """What one draw of the binlogsync page shows: its tables by row, and the lag chart's
    series as drawn (samples, and how many points and dots they gave)."""
    page: dict[str, Any] = browser.execute_script(_READ_PAGE)
    page["chart"] = {
        key: {"samples": json.loads(samples), "dots": dots, "points": points, "last": last}
        for key, samples, dots, points, last in page["chart"]
    }
    return page


# A whole `airflow standalone` beside a live site: 206–296 s in suites here, where Airflow alone
# took up to 116 s to be healthy while the compose site ran on the other worker; every wait
# inside has its own deadline, so this only bounds the sum.
@pytest.mark.timeout(900)
def test_standalone_runs_a_dag_and_shows_the_binlogsync_page(
    tmp_path: Path,
    origin: Server,
    target: Server,
    replica: Server,
    dbname: str,
    browser: webdriver.Chrome,
) -> None:
    create(
        [origin, target], dbname,
        "CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE u (id INT PRIMARY KEY)",
    )  # fmt: skip
    s, service_port = service_site(tmp_path, origin, [target], dbname, curve=True)
    with s:
        s.start()
        s.wait_online()
        wait_service(service_port)
        follow(replica, service_port)  # a subscriber of the binlog service
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(25)])
        wait_equal(s, dbname, ["t"])
        # The target drifts (a row lost, a row added there): the reconciliation finds both.
        target.sql(f"DELETE FROM `{dbname}`.t WHERE id = 7")
        target.sql(f"INSERT INTO `{dbname}`.t VALUES (1000)")
        run = tmp_path / "reconcile-run"
        reconcile = _cli(
            tmp_path / "reconcile.log", "reconcile", f"--source=mysql://root@127.0.0.1:{origin.port}",
            f"--target=mysql://root@127.0.0.1:{target.port}", f"--tables={dbname}.t",
            "--pin=none", f"--out={run}",
        )  # fmt: skip
        # While Airflow starts, the target agent is away and transactions wait for it: the
        # hub's lag history gets a rise and, once it is back, a fall.
        # (In table u, which the reconciliation does not compare.)
        s.stop(target.name)
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            for i in range(10):  # ten transactions
                cur.execute("INSERT INTO u VALUES (%s)", (i,))
                conn.commit()
        env = site_env(tmp_path / "airflow", s)
        state_dir = Path(env["AIRFLOW__BINLOGSYNC__STATE_DIR"])
        migrate(env)
        airflow = Standalone(env, free_port())
        try:
            seconds = airflow.start()
            print(f"airflow standalone healthy after {seconds:.1f} s")
            s.start(target.name)
            reconcile.wait(timeout=300)
            output = (tmp_path / "reconcile.log").read_text(errors="replace")
            assert reconcile.returncode == 1, output[-3000:]  # differences: exit 1
            kept = _cli(tmp_path / "result.log", "reconcile-result", f"--out={run}",
                        f"--state={state_dir / 'reconcile' / 'origin'}")  # fmt: skip
            kept.wait(timeout=120)
            output = (tmp_path / "result.log").read_text(errors="replace")
            assert kept.returncode == 1 and "2 row(s) differ" in output, output[-3000:]

            run_id = airflow.trigger("outbox_retries")
            assert airflow.wait_run("outbox_retries", run_id) == "success", airflow.log.read_text()[
                -4000:
            ]
            assert (state_dir / "last-outbox.json").exists()
            wait_equal(s, dbname, [])  # the target caught up again

            # The page's endpoints are behind Airflow's login.
            summary = "/binlogsync/api/reconcile/origin/summary.json"
            for path in ("/binlogsync/", "/binlogsync/api/overview", summary):
                assert _get(airflow, path, None)[0] == 401, path
            # The report is served to a logged-in user: exactly the run's summary.json, and
            # nothing else whatever the job's name says.
            token = airflow.token()
            code, body = _get(airflow, summary, token)
            assert code == 200 and body == (run / "summary.json").read_bytes()
            secret = s.keys / "hub.key_secret"
            for hostile in (
                "..%2F..%2F..%2Fkeys%2Fhub.key_secret", "..", "%2e%2e", "origin%2F..%2Forigin",
                "%2Fetc%2Fpasswd", "origin%00", "nosuchjob", "..%2F" * 12 + "etc%2Fpasswd",
            ):  # fmt: skip
                code, body = _get(airflow, f"/binlogsync/api/reconcile/{hostile}/summary.json",
                                  token)  # fmt: skip
                assert code == 404 and secret.read_bytes() not in body, (hostile, code)
                assert b"root:" not in body, hostile

            browser.get(f"{airflow.url}/auth/login")
            wait = PageWait(browser, 60, tmp_path / "shots")
            wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
            browser.find_element(By.NAME, "password").send_keys(airflow.password)
            browser.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
            wait.until(lambda d: "/auth/login" not in d.current_url)
            _open_plugin_page(browser, f"{airflow.url}/plugin/binlogsync", tmp_path)
            # A sample with a backlog, and a later one without: the rise and the fall.
            wait.until(lambda d: any(
                any(x[2] for x in v["samples"]) and v["samples"][-1][2] == 0
                for v in _page(d)["chart"].values()
            ))  # fmt: skip
            page = _page(browser)
            chart = page["chart"]
            status = _status_json(s, "--history")
            assert page["hosts"] == {
                h["name"]: "online" if h["online"] else "offline" for h in status["hosts"]
            }
            for t in status["targets"]:
                row = page["pairs"][f"{t['origin']}>{t['target']}"]
                assert int(row["backlog"]) == t["backlog"], row
                assert t["applied"]["gtid"] in row["applied"], row

            # The chart: per target and origin the hub's samples up to the page's last one,
            # each drawn as a point of the line and a dot, the legend's "now" its last lag.
            history = {f"{p['origin']}>{p['target']}": p["samples"]
                       for p in status["history"]["pairs"]}  # fmt: skip
            assert set(chart) == set(history) == {f"origin>{target.name}"}
            for key, drawn in chart.items():
                upto = drawn["samples"][-1][0]
                assert drawn["samples"] == [x for x in history[key] if x[0] <= upto]
                assert drawn["dots"] == drawn["points"] == len(drawn["samples"]) >= 2
                assert drawn["last"] == f"{drawn['samples'][-1][1]:.1f}"
                assert max(x[2] for x in drawn["samples"]) >= 10, drawn  # the wait is seen
                assert max(x[1] for x in drawn["samples"]) > 0
            print(f"lag chart: {json.dumps(chart)}")

            # The binlog service's subscribers: the replica, where `status` says it reads.
            subscribers = status["binlog_service"]["subscribers"]
            assert [x["server_id"] for x in subscribers] == [replica.server_id]
            for sub in subscribers:
                row = page["subscribers"][str(sub["server_id"])]
                assert row["position"] == f"{sub['file']}:{sub['position']}", row
                assert sub["mode"] in row["text"] and sub["address"] in row["text"], row

            # The last reconciliation: its result, its differing rows, the link to its report.
            last = json.loads(
                (state_dir / "reconcile" / "origin" / "last-reconcile.json").read_text()
            )
            job = page["jobs"]["origin"]
            assert job["result"] == f"different: {last['differing_rows']} row(s) differ", job
            assert job["report"] == f"{airflow.url}{summary}", job
            shown_rows = sorted(tuple(r) for r in page["rows"]["origin"])
            assert shown_rows == sorted(
                (r["table"], r["target"], r["kind"], r["key"]) for r in last["rows"]
            )
            assert {r[2] for r in shown_rows} == {"missing", "extra"} and len(shown_rows) == 2
            assert any('"id": 7' in r[3] or '"id":7' in r[3] for r in shown_rows)
            browser.switch_to.default_content()
            shot = tmp_path / "binlogsync-page.png"
            browser.save_screenshot(str(shot))
            print(f"screenshot: {shot}")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

            # The connection form: a binlogsync connection added through the UI, tested.
            keys, port = s.keys, int(s.hub_port or 0)
            form_shot = tmp_path / "binlogsync-connection-form.png"
            _add_connection(browser, wait, airflow.url, "bls_form", port,
                            keys / "hub.key_secret", keys / "hub.key", form_shot)  # fmt: skip
            assert form_shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            kind, text = _press_test(browser, wait, "bls_form")
            online = sum(1 for h in status["hosts"] if h["online"])
            assert kind == "success", text
            assert "Test Connection Successful" in text
            assert f"hub hub answered: {online}/{len(status['hosts'])} hosts online" in text
            # The same with the origin's public key where the hub's belongs.
            _add_connection(browser, wait, airflow.url, "bls_wrong_key", port,
                            keys / "hub.key_secret", keys / "origin.key")  # fmt: skip
            started = time.monotonic()
            kind, text = _press_test(browser, wait, "bls_wrong_key")
            print(f"wrong hub key: {text!r} after {time.monotonic() - started:.1f} s")
            assert kind == "error" and "Test Connection Failed" in text, text
            assert f"the hub at tcp://127.0.0.1:{port} did not answer" in text
            assert "refused the CURVE handshake" in text
            assert "hub_public_key_file" in text
        finally:
            airflow.stop()
            stop_replica(replica)
            if reconcile.poll() is None:
                reconcile.kill()
                reconcile.wait()
