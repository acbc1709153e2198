"""The Ray dashboard during a sweep, in a real browser (Debian's Chromium driven by
Playwright): the token login works, the sweep is one job named after the sweep,
and every running trial's actor is listed under its trial's name, in the Actors
page's Name column."""

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.orchestrator.e2e import SWEEPS, cli, dashboard_answers, free_port

CHROMIUM = shutil.which("chromium")


def _goto(page, url: str) -> None:
    """page.goto, again where the dashboard's own navigation to its overview (once
    the token is taken, sometimes twice) interrupts it (seen on a fresh clone)."""
    from playwright.sync_api import Error as PlaywrightError

    for attempt in range(3):
        try:
            page.goto(url)
            return
        except PlaywrightError as e:
            if "interrupted by another navigation" not in str(e) or attempt == 2:
                raise
            page.wait_for_load_state()


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/test installs it where apt can)")
def test_the_dashboard_lists_each_running_trial_by_name(tmp_path, ray_temp):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["training"].update(samples=200_000)  # both trials run for minutes: the test stops them
    spec_path = tmp_path / "watched.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "runs" / "istree_micro"
    port = free_port()
    launch = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(tmp_path / "runs"), "--dashboard",
                                  ray_temp=ray_temp, port=port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and len(list(run_dir.glob("*/params.json"))) < 2:
            time.sleep(0.5)
        names = sorted(p.parent.name for p in run_dir.glob("*/params.json"))
        assert len(names) == 2 and dashboard_answers(port), launch.stdout.read() if launch.poll() is not None else names
        token = (Path.home() / ".ray" / "auth_token").read_text().strip()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.get_by_placeholder("Enter your authentication token").fill(token)
            page.get_by_role("button", name="Submit").click()
            # The dashboard goes to its overview once the token is taken; a page.goto
            # before that navigation lands is interrupted by it.
            try:
                page.wait_for_url(re.compile(r"#/overview"), timeout=30_000)
            except PlaywrightTimeout:
                pass  # a dashboard that stays where it is: nothing to wait for
            _goto(page, f"http://127.0.0.1:{port}/#/actors")
            for name in names:
                page.get_by_text(name, exact=True).first.wait_for(timeout=60_000)
            assert "trainable_fn" not in page.inner_text("body")  # Tune's repr, the same for every trial
            # The Name column (the actor's name, which its search filters on) holds each trial's name.
            headers = [h.strip().split("\n")[0] for h in page.locator("table thead th").all_inner_texts()]
            column = headers.index("Name") + 1
            named = {c.strip() for c in page.locator(f"table tbody tr td:nth-child({column})").all_inner_texts()}
            assert set(names) <= named, (headers, named)
            # ... and the page's Name search finds one trial's actor alone.
            page.get_by_role("textbox", name="Name", exact=True).fill(names[0])
            page.keyboard.press("Enter")
            rows = page.locator("table tbody tr")
            deadline = time.time() + 30
            while time.time() < deadline and rows.count() != 1:
                time.sleep(0.5)
            assert rows.count() == 1 and names[0] in rows.first.inner_text()
            if os.environ.get("ICR_SCREENSHOTS"):  # evidence for a human: where to keep the page
                page.screenshot(path=str(Path(os.environ["ICR_SCREENSHOTS"]) / "ray_actors.png"), full_page=True)
            _goto(page, f"http://127.0.0.1:{port}/#/jobs")
            page.get_by_text("RUNNING", exact=True).first.wait_for(timeout=30_000)
            jobs = page.get_by_text("orchestrator.cli launch", exact=False)
            assert jobs.count() == 1 and str(spec_path) in jobs.first.inner_text()
            # The Jobs page's Name column (the job's metadata job_name) is the sweep's name.
            page.get_by_text(spec["name"], exact=True).first.wait_for(timeout=30_000)
            browser.close()
    finally:
        launch.send_signal(signal.SIGINT)
        try:
            launch.wait(timeout=120)
        except subprocess.TimeoutExpired:
            launch.kill()
