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

from ..support.golden_logs import LOGS
from ..support.web_server import ui_server

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
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
    # the golden log is unsigned: each writer says so (a signed log's: tests/log/test_writers.py)
    expect(page.get_by_test_id("job-writers")).to_have_text("submitted by: unsigned")
    expect(page.locator("#exceptions tbody tr").first).to_contain_text("unsigned")
    expect(page.locator("#statuses tbody tr").first).to_contain_text("CREATED")

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


IDLE_BEATS = 720
"""Two hours of one TaskExecutor's beats every 10 s after the job ended: a log that goes on
idling, whose whole length once squeezed the job's attempts into 1-px slivers."""


@pytest.fixture
def idle_page(tmp_path) -> Iterator[object]:
    """The fail-once log, then two idle hours, then the TaskExecutor lost; opened at a link
    naming the job and its `count` vertex."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    from jobledger.projections.log.log_file import LogRecord, read_export, write_export
    from jobledger.schemas.cluster import TaskManagerHeartbeat, TaskManagerLost
    from jobledger.schemas.topics import TopicRole

    records = list(read_export(LOGS / "wordcount-fail-once.avro"))
    rm = [r for r in records if r.role is TopicRole.RESOURCE_MANAGER]
    offset, at = rm[-1].offset + 2, max(r.timestamp for r in records)
    header = {"producer": "runner", "resource_id": "runner-0"}
    for n in range(IDLE_BEATS):
        at += 10_000
        beat = TaskManagerHeartbeat(event_id=f"idle-{n}", event_time=at, **header)
        records.append(LogRecord(TopicRole.RESOURCE_MANAGER, 0, offset + n, at, beat))
    lost = TaskManagerLost(event_id="lost", event_time=at + 1, producer="operator",
                           resource_id="runner-0", cause="decommissioned")  # fmt: skip
    records.append(LogRecord(TopicRole.RESOURCE_MANAGER, 0, offset + IDLE_BEATS, at + 1, lost))
    log = tmp_path / "idle.avro"
    with log.open("wb") as out:
        write_export(records, out)
    with ui_server(log) as url, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, headless=True)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 1400})
            tab.set_default_timeout(TIMEOUT_MS)
            tab.goto(f"{url}?job={JOB}&vertex=count")
            yield tab
        finally:
            browser.close()


def test_a_job_keeps_its_own_time_axis_on_a_log_that_idled_on_and_every_view_is_a_link(
    idle_page,
):
    from playwright.sync_api import expect

    page = idle_page
    page.wait_for_selector('body[data-rendered-at="end"][data-loading="false"]')
    expect(page.get_by_test_id("loading")).to_be_hidden()
    expect(page.get_by_test_id("vertex-id")).to_have_text("count")
    assert page.url.endswith(f"/?job={JOB}&vertex=count")

    # the track is the job's 18 s, not the log's two hours: a count attempt of 1-3 s is a
    # tenth of it, where it was 0.03% (a sliver under one pixel)
    spans = page.eval_on_selector_all(".timeline .track", """tracks => tracks.map(track => {
        const bars = [...track.children].map(b => b.getBoundingClientRect());
        const left = Math.min(...bars.map(b => b.left));
        return (Math.max(...bars.map(b => b.right)) - left) / track.getBoundingClientRect().width;
    })""")  # fmt: skip
    assert len(spans) == 8 and min(spans) > 0.02, spans

    # a lost TaskManager is shown lost, and no longer counted
    expect(page.get_by_test_id("tm-runner-0")).to_contain_text("lost")
    assert "lost" in page.get_by_test_id("tm-runner-0").get_attribute("class")
    expect(page.get_by_test_id("overview-taskmanagers")).to_contain_text("0")

    page.get_by_test_id("attempt-2-1").click()
    expect(page.get_by_test_id("explain")).to_contain_text("count[2]")
    assert page.url.endswith(f"/?job={JOB}&vertex=count&attempt=2.1")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-idle-tail.png"), full_page=True)

    # by the job's own events, the slider's first step is the job's first record
    page.get_by_test_id("slide").select_option("job")
    slider = page.get_by_test_id("slider")
    slider.focus()
    page.keyboard.press("Home")
    page.wait_for_selector('body[data-rendered-at="job/0@0"]')
    expect(page.get_by_test_id("job-state")).to_have_text("INITIALIZING")
    assert "at=job%2F0%400" in page.url and "slide=job" in page.url

    # the link opens the same view
    page.goto(page.url)
    page.wait_for_selector('body[data-rendered-at="job/0@0"][data-loading="false"]')
    expect(page.get_by_test_id("job-state")).to_have_text("INITIALIZING")
    expect(page.get_by_test_id("slide")).to_have_value("job")


LINKED_AT = "job/0@118"
"""A point named by a record's place, as `jobledger explain` and `history` print it."""


@pytest.fixture
def linked_page() -> Iterator[object]:
    """The fail-once log opened at a link naming a point by its place in the job topic, in a
    browser whose zone is half an hour off the hour (a time shown without its zone, or in
    UTC, is told apart from one in the browser's zone)."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with ui_server(LOGS / "wordcount-fail-once.avro") as url, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, headless=True)
        try:
            tab = browser.new_page(
                viewport={"width": 1280, "height": 1500}, timezone_id="Asia/Kolkata"
            )
            tab.set_default_timeout(TIMEOUT_MS)
            tab.goto(f"{url}?job={JOB}&vertex=count&at={LINKED_AT}")
            yield tab
        finally:
            browser.close()


def test_a_link_places_the_slider_and_the_job_is_drawn_as_flink_draws_it(linked_page):
    from playwright.sync_api import expect

    from jobledger.projections.log.log_file import read_export
    from jobledger.projections.log.positions import cut, log_order

    page = linked_page
    page.wait_for_selector(f'body[data-rendered-at="{LINKED_AT}"][data-loading="false"]')
    records = cut(log_order(read_export(LOGS / "wordcount-fail-once.avro")), LINKED_AT).size
    expect(page.get_by_test_id("as-of")).to_contain_text(f"as of {LINKED_AT}: {records} records")
    assert page.get_by_test_id("slider").input_value() == str(records)
    expect(page.get_by_test_id("at-text")).to_have_text(LINKED_AT)

    # the graph: a box per vertex with its name, parallelism and state; an edge per input
    # with its ship strategy, left to right
    plan = page.evaluate(f"fetch('/jobs/{JOB}?at={LINKED_AT}').then(r => r.json())")
    boxes = page.locator('[data-testid^="graph-vertex-"]')
    expect(boxes).to_have_count(len(plan["plan"]["nodes"]))
    for vertex in plan["vertices"]:
        box = page.get_by_test_id(f"graph-vertex-{vertex['id']}")
        expect(box).to_contain_text(vertex["name"][:20])
        expect(box).to_contain_text(f"Parallelism: {vertex['parallelism']}")
        assert box.get_attribute("data-state") == vertex["status"]
        assert vertex["status"] in box.get_attribute("class")
    nodes = plan["plan"]["nodes"]
    edges = [(i["id"], n["id"], i["ship_strategy"]) for n in nodes for i in n["inputs"]]
    assert edges
    expect(page.locator(".graph .edge")).to_have_count(len(edges))
    for source, target, strategy in edges:
        expect(page.get_by_test_id(f"graph-edge-{source}-{target}")).to_contain_text(strategy)
        left = page.get_by_test_id(f"graph-vertex-{source}").bounding_box()
        right = page.get_by_test_id(f"graph-vertex-{target}").bounding_box()
        assert left["x"] + left["width"] < right["x"], (source, target)

    # the attempts chart has a time axis from the job's start and a legend of its colours
    expect(page.get_by_test_id("axis-start")).to_contain_text("+05:30")
    ticks = page.locator(".timeline .axis .tick").all_inner_texts()
    assert len(ticks) >= 3 and ticks[0] == "+0 s", ticks
    expect(page.get_by_test_id("legend-RUNNING")).to_be_visible()
    expect(page.get_by_test_id("legend-FAILED")).to_be_visible()

    # times carry the browser's zone
    exceptions = page.locator("#exceptions tbody tr td:first-child").all_inner_texts()
    assert exceptions and all(t.endswith(" +05:30") for t in exceptions), exceptions

    # the sidebar counts what the views show and leads to them
    expect(page.get_by_test_id("nav-job")).to_contain_text("Job ")
    expect(page.get_by_test_id("nav-taskmanagers")).to_contain_text("1")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-graph.png"), full_page=True)

    # a click on a box selects its vertex, as a click on its row does
    first = plan["plan"]["nodes"][0]["id"]
    page.get_by_test_id(f"graph-vertex-{first}").click()
    expect(page.get_by_test_id("vertex-id")).to_have_text(first)
    assert "selected" in page.get_by_test_id(f"graph-vertex-{first}").get_attribute("class")
