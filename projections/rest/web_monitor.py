"""Flink's WebMonitorEndpoint over the log: the REST API (Flink's v1 paths and field names,
plus jobledger's own endpoints under the same roots) and the dashboard page, served by one
FastAPI application.

Every endpoint answers as of a point of the log (`?at=POS`, the debugging suite's positions;
default: the end of the log as it is now) and says which offsets it reflects (`as-of`).
Errors are Flink's error JSON, `{"errors": [...]}`: 400 for a bad position or a malformed
query, 404 for an id the log does not hold at that point; never a 500 for bad input.

The log comes from a callable (an exported file read once, or the broker's topics followed by
the command line), so this module does no I/O of its own beyond serving its static files.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver

from ..debugging.explain import UnknownTarget, explain
from ..debugging.history import UnknownJob, history
from ..debugging.slots import slot_report
from ..log.log_file import LogRecord
from ..log.positions import FORMS, Position, PositionError, cut
from ..log.writers import Writers
from . import metrics
from . import rest_messages as messages
from .archived_execution_graph import ClusterArchive, UnknownVertex, archive
from .cluster_overview import cluster_overview
from .exceptions import job_exceptions
from .followed_archive import FollowedArchive
from .jobs import (
    UnknownSubtask,
    job_details,
    job_plan,
    jobs_overview,
    subtask_attempt,
    subtask_times,
    vertex_details,
)
from .task_managers import UnknownTaskManager, task_manager, task_managers

WEB = Path(__file__).parent / "web"
CACHED_ARCHIVES = 16
"""Archives kept per (log length, position): the page asks several endpoints per move of its
slider, each at the same point."""

POSITION_PATTERN = (
    r"^(end|count:[0-9]+|id:.+|[a-z]+/[0-9]+@[0-9]+|s@.+|[0-9]{4}-[0-9]{2}-[0-9]{2}.*)$"
)
"""The shapes of a position (`positions.Position.parse` says which name a point of this log)."""

Log = Callable[[], list[LogRecord]]


class Followed(Protocol):
    """A log that grows while it is served (the broker's topics, followed)."""

    partitions: dict[TopicRole, int]
    """How many partitions each input topic has."""

    def read_from(self, start: int) -> list[LogRecord]:
        """The records read so far from the `start`-th on, in the order read (the log's
        records as read are appended to only)."""


"""The log as it is now, in log order (`positions.log_order`)."""


class Errors(BaseModel):
    """Flink's error body."""

    errors: list[str]


ERRORS = {
    400: {"model": Errors, "description": "a bad position or a malformed query"},
    404: {"model": Errors, "description": "no such job, vertex or TaskManager at that point"},
}
NOT_FOUND = (UnknownJob, UnknownVertex, UnknownSubtask, UnknownTaskManager, UnknownTarget)

At = Annotated[
    str | None,
    Query(
        description=f"answer as of this point of the log: {FORMS} (default: end)",
        examples=["end", "count:10", "s@2026-11-24T19:00:20Z"],
        pattern=POSITION_PATTERN,
    ),
]
JobId = Annotated[str, "the job id"]


class Archives:
    """Archives of the log at the points asked for, the latest few kept: a point of a
    growing log is a new key once the log has grown, so a live view stays current."""

    def __init__(
        self, log: Log, driver_factory: Callable[[], ReducerDriver], followed: Followed | None,
        writers: Writers | None = None,
    ) -> None:  # fmt: skip
        self.log = log
        self.driver_factory = driver_factory
        self.writers = writers or Writers()
        """Who wrote each record (`--keyring`)."""
        self.lock = threading.Lock()
        self.making = threading.Lock()
        self.kept: OrderedDict[tuple[int, str], ClusterArchive] = OrderedDict()
        self.followed = followed
        self.end = (
            FollowedArchive(driver_factory, followed.partitions, self.writers) if followed else None
        )
        """The end of a followed log, advanced by what was read since the last ask."""
        self.at_end: ClusterArchive | None = None
        """The end's archive as last made (the state it holds changes in place)."""
        self.serving = threading.RLock()
        """Held by every request throughout: the end's state changes in place when asked."""

    def at(self, text: str | None) -> ClusterArchive:
        position = _position(text)
        if self.end is not None and position.kind == "end":
            with self.making:
                new = self.followed.read_from(self.end.applied)
                if new or self.at_end is None:  # the cut is the whole log: remade only as it grows
                    self.end.extend(new)
                    self.at_end = self.end.archive(cut(self.log(), position))
                return self.at_end
        records = self.log()
        key = (len(records), position.text)
        with self.lock:
            found = self.kept.get(key)
            if found is not None:
                self.kept.move_to_end(key)
                return found
        with self.making:  # the page asks several endpoints at once: replay the point once
            with self.lock:
                found = self.kept.get(key)
            if found is not None:
                return found
            made = archive(cut(records, position), self.driver_factory, self.writers)
            with self.lock:
                self.kept[key] = made
                while len(self.kept) > CACHED_ARCHIVES:
                    self.kept.popitem(last=False)
        return made


def _position(text: str | None) -> Position:
    try:
        return Position.parse(text if text else "end")
    except PositionError:
        raise
    except ValueError as exc:  # a number too long for int(), say
        raise PositionError(f"{text!r} is not a position: {exc}") from None


def _malformed(error: dict[str, Any]) -> str:
    """What is wrong with one part of a request; a position is told as the CLI tells it."""
    if tuple(error["loc"]) == ("query", "at") and isinstance(error.get("input"), str):
        try:
            _position(error["input"])
        except PositionError as exc:
            return f"at: {exc}"
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


def _errors(status: int, *messages: str) -> JSONResponse:
    return JSONResponse({"errors": list(messages)}, status_code=status)


def create_app(
    log: Log, title: str = "jobledger",
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
    followed: Followed | None = None, writers: Writers | None = None,
) -> FastAPI:  # fmt: skip
    """The REST API and the dashboard over `log`, replayed by the reducers `driver_factory`
    makes (the cluster's configuration), each record's writer named by `writers`; of a log
    that grows (`followed`), its end is not replayed at each ask but advanced by what was
    read since (followed_archive.py)."""
    app = FastAPI(
        title=f"{title} REST API",
        description="Flink's REST API (v1) over a jobledger log, at any point of it.",
        version="v1",
        generate_unique_id_function=lambda route: route.name,
    )
    archives = Archives(log, driver_factory, followed, writers)
    _handle_errors(app)
    _flink_routes(app, archives)
    _jobledger_routes(app, archives, log)
    app.mount("/web", StaticFiles(directory=WEB), name="web")
    _flink_status_codes(app)

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(WEB / "index.html")

    return app


def _flink_status_codes(app: FastAPI) -> None:
    """The OpenAPI document says what the server does: a malformed request is a 400 with
    Flink's error JSON, not FastAPI's 422 with its own."""
    make = app.openapi

    def document() -> dict[str, Any]:
        schema = make()
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation["responses"].pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = document


def _handle_errors(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _errors(400, *(_malformed(e) for e in exc.errors()))

    @app.exception_handler(HTTPException)
    async def http(_: Request, exc: HTTPException) -> JSONResponse:
        response = _errors(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})  # a 405's Allow
        return response

    @app.exception_handler(PositionError)
    async def bad_position(_: Request, exc: PositionError) -> JSONResponse:
        return _errors(400, str(exc))

    for kind in NOT_FOUND:

        @app.exception_handler(kind)
        async def not_found(_: Request, exc: LookupError) -> JSONResponse:
            return _errors(404, str(exc.args[0]) if exc.args else str(exc))


def _route(app: FastAPI, archives: Archives) -> Callable[..., Callable[[Callable], Callable]]:
    """`app.get` with Flink's errors declared, and OpenAPI links (operation id -> parameter ->
    where its value is) from an answer to the operations that take the ids it holds; each
    request served holding `archives.serving`."""

    def get(
        path: str, summary: str, links: dict[str, dict[str, str]] | None = None,
        model: Any = None, exclude_none: bool = False,
    ):  # fmt: skip
        ok = {"description": "the answer, with the offsets it reflects (`as-of`)"}
        if links:
            ok["links"] = {
                operation: {"operationId": operation, "parameters": parameters}
                for operation, parameters in links.items()
            }
        route = app.get(
            path, summary=summary, responses={200: ok, **ERRORS}, response_model=model,
            response_model_exclude_none=exclude_none,
        )  # fmt: skip

        def serve(endpoint: Callable) -> Callable:
            @functools.wraps(endpoint)
            def serving(*args: Any, **kwargs: Any) -> Any:
                with archives.serving:
                    return endpoint(*args, **kwargs)

            return route(serving)

        return serve

    return get


def _job_links(jobid: str) -> dict[str, dict[str, str]]:
    return {op: {"jobid": jobid} for op in ("job", "plan", "exceptions", "job_history")}


def _flink_routes(app: FastAPI, archives: Archives) -> None:
    get = _route(app, archives)
    _metric_routes(get, archives)  # before /taskmanagers/{taskmanagerid}, which would take it

    @get(
        "/overview", "TaskManagers, slots and jobs by status (Flink's ClusterOverview)",
        model=messages.ClusterOverviewWithVersion,
    )  # fmt: skip
    def overview(at: At = None) -> dict[str, Any]:
        return cluster_overview(archives.at(at))

    @get(
        "/jobs/overview", "every job with its status, times and task counts",
        _job_links("$response.body#/jobs/0/jid"), messages.MultipleJobsDetails,
    )  # fmt: skip
    def overview_of_jobs(at: At = None) -> dict[str, Any]:
        return jobs_overview(archives.at(at))

    @get(
        "/jobs", "every job's id and status", _job_links("$response.body#/jobs/0/id"),
        messages.JobIdsWithStatusOverview,
    )  # fmt: skip
    def job_ids(at: At = None) -> dict[str, Any]:
        cluster = archives.at(at)
        return {
            "jobs": [{"id": j.job_id, "status": j.status} for j in cluster.jobs.values()],
            "as-of": cluster.as_of(),
        }

    vertex_of_job = {"jobid": "$request.path.jobid", "vertexid": "$response.body#/vertices/0/id"}

    @get(
        "/jobs/{jobid}", "a job: status, times per status, vertices with task counts",
        {"vertex": vertex_of_job, "times": vertex_of_job,
         "task_explain": {**vertex_of_job, "subtaskindex": "0"}},
        messages.JobDetailsInfo,
    )  # fmt: skip
    def job(jobid: JobId, at: At = None) -> dict[str, Any]:
        return job_details(archives.at(at), jobid)

    @get("/jobs/{jobid}/plan", "a job's dataflow plan (its JobGraph)", model=messages.JobPlanInfo)
    def plan(jobid: JobId, at: At = None) -> dict[str, Any]:
        return job_plan(archives.at(at), jobid)

    @get(
        "/jobs/{jobid}/exceptions", "a job's root exception and exception history",
        model=messages.JobExceptionsInfoWithHistory,
    )  # fmt: skip
    def exceptions(jobid: JobId, at: At = None) -> dict[str, Any]:
        return job_exceptions(archives.at(at), jobid)

    @get(
        "/jobs/{jobid}/vertices/{vertexid}", "a vertex's subtasks and their attempts",
        model=messages.JobVertexDetailsWithSubtasks,
    )  # fmt: skip
    def vertex(jobid: JobId, vertexid: str, at: At = None) -> dict[str, Any]:
        return vertex_details(archives.at(at), jobid, vertexid)

    @get(
        "/jobs/{jobid}/vertices/{vertexid}/subtasktimes", "when each subtask entered each state",
        model=messages.SubtasksTimesInfo,
    )  # fmt: skip
    def times(jobid: JobId, vertexid: str, at: At = None) -> dict[str, Any]:
        return subtask_times(archives.at(at), jobid, vertexid)

    @get(
        "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}",
        "a subtask's current attempt", model=messages.SubtaskExecutionAttemptInfo,
    )  # fmt: skip
    def subtask(jobid: JobId, vertexid: str, subtaskindex: int, at: At = None) -> dict[str, Any]:
        return subtask_attempt(archives.at(at), jobid, vertexid, subtaskindex, None)

    @get(
        "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/attempts/{attempt}",
        "one attempt of a subtask", model=messages.SubtaskExecutionAttemptInfo,
    )  # fmt: skip
    def subtask_attempt_of(
        jobid: JobId, vertexid: str, subtaskindex: int, attempt: int, at: At = None
    ) -> dict[str, Any]:
        return subtask_attempt(archives.at(at), jobid, vertexid, subtaskindex, attempt)

    @get("/jobs/{jobid}/status", "a job's status", model=messages.JobStatusInfo)
    def status(jobid: JobId, at: At = None) -> dict[str, Any]:
        cluster = archives.at(at)
        return {"status": cluster.job(jobid).status, "as-of": cluster.as_of()}

    @get("/config", "the dashboard's configuration", model=messages.DashboardConfiguration)
    def config() -> dict[str, Any]:
        return {
            "refresh-interval": 2000, "timezone-name": "UTC", "timezone-offset": 0,
            "flink-version": "jobledger", "flink-revision": "",
            "features": {"web-submit": False, "web-cancel": False, "web-history": False},
        }  # fmt: skip

    @get(
        "/taskmanagers", "every TaskManager with its slots",
        {"taskmanager": {"taskmanagerid": "$response.body#/taskmanagers/0/id"}},
        messages.TaskManagersInfo,
    )  # fmt: skip
    def taskmanagers(at: At = None) -> dict[str, Any]:
        return task_managers(archives.at(at))

    @get(
        "/taskmanagers/{taskmanagerid}", "a TaskManager and each of its slots",
        model=messages.TaskManagerDetailsInfo,
    )  # fmt: skip
    def taskmanager(taskmanagerid: str, at: At = None) -> dict[str, Any]:
        return task_manager(archives.at(at), taskmanagerid)


Get = Annotated[
    str | None, Query(description="comma-separated metric ids to answer with their values")
]


def _metric_routes(get: Callable, archives: Archives) -> None:
    """Flink's metric endpoints (`metrics.py`): JSON arrays, as Flink answers them."""
    values = list[metrics.MetricValue]

    @get("/jobmanager/metrics", "the cluster's metrics (Flink's JobManager scope)",
         model=values, exclude_none=True)  # fmt: skip
    def jobmanager_metrics(at: At = None, get: Get = None) -> list[dict[str, Any]]:
        return metrics.jobmanager_metrics(archives.at(at), get)

    @get("/jobs/{jobid}/metrics", "a job's metrics: uptime, downtime, restarts, states",
         model=values, exclude_none=True)  # fmt: skip
    def job_metrics(jobid: JobId, at: At = None, get: Get = None) -> list[dict[str, Any]]:
        return metrics.job_metrics(archives.at(at), jobid, get)

    @get(
        "/taskmanagers/metrics", "metrics aggregated over TaskManagers (agg: min,max,avg,sum,"
        "skew; taskmanagers: ids, default all)", model=list[metrics.AggregatedMetric],
        exclude_none=True,
    )  # fmt: skip
    def task_managers_metrics(
        at: At = None, get: Get = None, agg: str | None = None, taskmanagers: str | None = None
    ) -> list[dict[str, Any]]:
        return metrics.task_managers_metrics(archives.at(at), get, agg, taskmanagers)

    @get("/taskmanagers/{taskmanagerid}/metrics", "a TaskManager's metrics", model=values,
         exclude_none=True)  # fmt: skip
    def task_manager_metrics(
        taskmanagerid: str, at: At = None, get: Get = None
    ) -> list[dict[str, Any]]:
        return metrics.task_manager_metrics(archives.at(at), taskmanagerid, get)


def _jobledger_routes(app: FastAPI, archives: Archives, log: Log) -> None:
    get = _route(app, archives)

    @get("/slots", "(jobledger) every pending slot request and why nothing satisfies it")
    def slots(at: At = None) -> dict[str, Any]:
        cluster = archives.at(at)
        return slot_report(cluster.driver, cluster.cut).to_dict()

    @get("/jobs/{jobid}/history", "(jobledger) every event of a job, in log order, with causes")
    def job_history(jobid: JobId, at: At = None) -> dict[str, Any]:
        cluster = archives.at(at)
        entries = history(cluster.cut.records, jobid, timers=False, writers=archives.writers)
        return {"job": jobid, "events": [e.to_dict() for e in entries], "as-of": cluster.as_of()}

    @get(
        "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/explain",
        "(jobledger) a subtask's story: each attempt from slot request to its end",
    )
    def task_explain(
        jobid: JobId, vertexid: str, subtaskindex: Annotated[int, "subtask"],
        at: At = None, attempt: Annotated[int | None, Query(ge=0)] = None,
    ) -> dict[str, Any]:  # fmt: skip
        cluster = archives.at(at)
        cluster.job(jobid)
        target = f"{jobid}/{vertexid}[{subtaskindex}]" + (
            f"#{attempt}" if attempt is not None else ""
        )
        story = explain(cluster.cut.records, cluster.driver, target, archives.writers)
        return {**story.to_dict(), "as-of": cluster.as_of()}

    @get("/log", "(jobledger) the log's length and its job status changes, for a time slider")
    def log_overview() -> dict[str, Any]:
        records = log()
        marks = [
            {"count": n + 1, "timestamp": r.timestamp, "job": r.event.job_id,
             "status": r.event.to_status.value}
            for n, r in enumerate(records) if isinstance(r.event, JobStatusChanged)
        ]  # fmt: skip
        return {
            "records": len(records),
            "first-timestamp": records[0].timestamp if records else None,
            "last-timestamp": records[-1].timestamp if records else None,
            "marks": marks,
        }
