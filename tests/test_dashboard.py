"""The dashboard in a real browser: Playwright drives Debian's headless Chromium through
`jobledger ui` over a golden log, clicking through jobs, vertices and their attempts, and
moving the time slider, asserting what each view shows. A screenshot is saved under
tests/artifacts/ (gitignored).

Without Chromium (or Playwright) the test skips, unless JOBLEDGER_REQUIRE_BROWSER=1 (CI),
where that is a failure: `make browser` installs it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .golden_logs import LOGS
from .web_server import ui_server

ARTIFACTS = Path(__file__).parent / "artifacts"
JOB = "wordcount-94877528"
RESTARTING = 186
"""wordcount-fail-once's record count when its job turned RESTARTING: count[1] had failed, and
under region failover the other count subtasks go on."""
TIMEOUT_MS = 30_000


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    reason = None if found else "no chromium on PATH (`make browser` installs Debian's)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "playwright is not installed (the `ui` extra)"
    if reason is not None:
        if os.environ.get("JOBLEDGER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"a browser is required here: {reason}")
        pytest.skip(reason)
    return found


@pytest.fixture
def page() -> Iterator[object]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with ui_server(LOGS / "wordcount-fail-once.avro") as url, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, headless=True)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 1400})
            tab.set_default_timeout(TIMEOUT_MS)
            tab.goto(url)
            yield tab
        finally:
            browser.close()


def _at(page, count: int | None) -> None:
    """Move the slider to `count` records, or to the end (None) by keyboard as a user does,
    and wait until every view shows that point."""
    slider = page.get_by_test_id("slider")
    if count is None:
        slider.focus()
        page.keyboard.press("End")
    else:
        slider.fill(str(count))
    wanted = "end" if count is None else f"count:{count}"
    page.wait_for_selector(f'body[data-rendered-at="{wanted}"]')


def test_clicking_through_a_job_that_failed_once_and_back_in_time(page):
    from playwright.sync_api import expect

    page.wait_for_selector('body[data-rendered-at="end"]')
    expect(page.get_by_test_id("overview-jobs-finished")).to_contain_text("1")
    expect(page.get_by_test_id("overview-slots-total")).to_contain_text("8")
    expect(page.get_by_test_id(f"job-row-{JOB}")).to_contain_text("FINISHED")
    expect(page.get_by_test_id("tm-runner-0")).to_contain_text("8 of 8 slots free")

    page.get_by_test_id(f"job-row-{JOB}").click()
    expect(page.get_by_test_id("job-state")).to_have_text("FINISHED")
    expect(page.get_by_test_id("vertex-row-count")).to_contain_text("FINISHED 4")
    page.get_by_test_id("vertex-row-count").click()
    expect(page.get_by_test_id("attempt-0-0")).to_have_text("[0] #0 FAILED runner-0/0")
    expect(page.get_by_test_id("attempt-0-1")).to_have_text("[0] #1 FINISHED runner-0/0")
    expect(page.locator("#exceptions tbody tr")).to_have_count(4)

    _at(page, RESTARTING)
    expect(page.get_by_test_id("as-of")).to_contain_text(f"as of count:{RESTARTING}: 186 records")
    expect(page.get_by_test_id("job-state")).to_have_text("RESTARTING")
    expect(page.get_by_test_id("vertex-row-count")).to_contain_text("FAILED")
    expect(page.get_by_test_id("attempt-1-0")).to_have_text("[1] #0 FAILED runner-0/1")
    expect(page.get_by_test_id("attempt-1-1")).to_have_count(0)
    expect(page.get_by_test_id("attempt-0-0")).to_have_text("[0] #0 RUNNING runner-0/0")
    expect(page.locator("#exceptions tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("root-exception")).to_contain_text("InjectedFailure")
    expect(page.get_by_test_id("slot-runner-0-1")).to_have_text(f"1: ALLOCATED to {JOB}")
    page.get_by_test_id("attempt-1-0").click()
    expect(page.get_by_test_id("explain")).to_contain_text("deployed to runner-0 slot 1")
    expect(page.get_by_test_id("explain")).to_contain_text(
        "now: job RESTARTING; attempt 0 is FAILED"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-restarting.png"), full_page=True)

    _at(page, 0)
    expect(page.locator("#jobs tbody tr")).to_have_count(0)
    expect(page.get_by_test_id("job-state")).to_have_text("not in the log at this point")
    expect(page.get_by_test_id("overview-taskmanagers")).to_contain_text("0")

    _at(page, None)
    expect(page.get_by_test_id("job-state")).to_have_text("FINISHED")
    expect(page.get_by_test_id("at-text")).to_have_text("end (284)")
