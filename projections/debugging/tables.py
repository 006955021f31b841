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
    parts.append(_table(
        ["job", "status", "leader", "restarts", "held slots", "pending requests"],
        [[job, jm.status.value, jm.job_master_id, jm.restarts, len(jm.pool.allocated_slots),
          len(jm.pool.pending_requests) + len(jm.pool.waiting_for_resource_manager)]
         for job, jm in sorted(driver.job_masters.items())],
    ))  # fmt: skip
    parts += ["", "task executors at the resource manager"]
    parts.append(_table(
        ["resource", "slots"],
        [[rid, " ".join(s.state.value[0] for s in te.slots)]
         for rid, te in sorted(driver.resource_manager.task_executors.items())],
    ))  # fmt: skip
    parts += ["", "slot tables"]
    parts.append(_table(
        ["resource", "allocation", "index", "job", "state", "tasks"],
        [[rid, s.allocation_id, s.index, s.job_id, s.state.value, len(s.tasks)]
         for rid, te in sorted(driver.task_executors.items()) if te.table
         for s in te.table.slots.values()],
    ))  # fmt: skip
    return "\n".join(parts)
