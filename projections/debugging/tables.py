"""Replayed state as plain-text tables, for people reading a log at a terminal."""

from __future__ import annotations

from ..log.positions import Cut
from ..log.replay import ReplayResult


def _table(header: list[str], rows: list[list[object]]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def as_of_line(cut: Cut) -> str:
    """Which part of the log an answer reflects, in one line."""
    offsets = " ".join(f"{p}@{o}" for p, o in sorted(cut.offsets.items())) or "none"
    return f"as of {cut.position}: {cut.size} records, last offsets {offsets}"


def state_table(result: ReplayResult, cut: Cut) -> str:
    driver = result.driver
    parts = [as_of_line(cut), "", "jobs"]
    jobs = []
    for job, jm in sorted(driver.job_masters.items()):
        info = jm.info()
        allocated = sum(1 for s in jm.pool.slots() if s.slot_request_id is not None)
        jobs.append([job, info.status.value, info.job_master_id, info.restarts, allocated,
                     len(jm.pool.pending_slot_requests())])  # fmt: skip
    parts.append(_table(
        ["job", "status", "leader", "restarts", "held slots", "pending requests"], jobs
    ))  # fmt: skip
    parts += ["", "task executors at the resource manager"]
    parts.append(_table(
        ["resource", "slots"],
        [[rid, " ".join(s.state.value[0] for s in te.slots)]
         for rid, te in sorted(driver.resource_manager.task_managers().items())],
    ))  # fmt: skip
    parts += ["", "slot tables"]
    parts.append(_table(
        ["resource", "allocation", "index", "job", "state", "tasks"],
        [[rid, s.allocation_id, s.index, s.job_id, s.state.value, s.tasks]
         for rid, te in sorted(driver.task_executors.items())
         for s in te.task_slots()],
    ))  # fmt: skip
    return "\n".join(parts)
