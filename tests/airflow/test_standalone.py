"""Once per suite, the real thing: `airflow standalone` started over a live site, a DAG
triggered over the REST API and waited for, the binlogsync page refused without a login, and
loaded in headless Chromium after logging in through Airflow's own form: a screenshot is
saved under the test's output, and the numbers read from the rendered page equal
`binlogsync status --json`."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from binlogsync_dev.airflow_site import Standalone, migrate, site_env
from binlogsync_dev.localsite import LocalSite
from binlogsync_dev.sandbox import Server, free_port
from sitekit import create, site, wait_equal

pytestmark = pytest.mark.airflow

CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1100",
)  # fmt: skip


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _status_json(s: LocalSite) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [sys.executable, "-m", "binlogsync.cli", "status", "--config",
         str(s.agents["hub"].config), "--json"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_standalone_runs_a_dag_and_shows_the_binlogsync_page(
    tmp_path: Path, origin: Server, target: Server, dbname: str, browser: webdriver.Chrome
) -> None:
    create([origin, target], dbname, "CREATE TABLE t (id INT PRIMARY KEY)")
    with site(tmp_path, origin, [target], dbname) as s:
        s.start()
        s.wait_online()
        with origin.connect(dbname) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(25)])
        wait_equal(s, dbname, ["t"])
        env = site_env(tmp_path / "airflow", s)
        migrate(env)
        airflow = Standalone(env, free_port())
        try:
            seconds = airflow.start()
            print(f"airflow standalone healthy after {seconds:.1f} s")

            run_id = airflow.trigger("outbox_retries")
            assert airflow.wait_run("outbox_retries", run_id) == "success", airflow.log.read_text()[
                -4000:
            ]
            assert (tmp_path / "airflow" / "state" / "last-outbox.json").exists()

            # The page's endpoints are behind Airflow's login.
            for path in ("/binlogsync/", "/binlogsync/api/overview"):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(airflow.url + path, timeout=10)
                assert refused.value.code == 401
                refused.value.close()

            browser.get(f"{airflow.url}/auth/login")
            wait = WebDriverWait(browser, 60)
            wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
            browser.find_element(By.NAME, "password").send_keys(airflow.password)
            browser.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
            wait.until(lambda d: "/auth/login" not in d.current_url)
            browser.get(f"{airflow.url}/plugin/binlogsync")
            frame = wait.until(ec.presence_of_element_located((By.TAG_NAME, "iframe")))
            browser.switch_to.frame(frame)
            wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
            status = _status_json(s)
            shown_hosts = {
                row.get_attribute("data-host"): row.find_element(
                    By.CSS_SELECTOR, "[data-field=online]"
                ).text
                for row in browser.find_elements(By.CSS_SELECTOR, "tr[data-host]")
            }
            assert shown_hosts == {
                h["name"]: "online" if h["online"] else "offline" for h in status["hosts"]
            }
            for t in status["targets"]:
                row = browser.find_element(
                    By.CSS_SELECTOR, f"tr[data-pair='{t['origin']}>{t['target']}']"
                )
                assert (
                    int(row.find_element(By.CSS_SELECTOR, "[data-field=backlog]").text)
                    == t["backlog"]
                )
                applied = row.find_element(By.CSS_SELECTOR, "[data-field=applied]").text
                assert t["applied"]["gtid"] in applied
            browser.switch_to.default_content()
            shot = tmp_path / "binlogsync-page.png"
            browser.save_screenshot(str(shot))
            print(f"screenshot: {shot}")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            airflow.stop()
