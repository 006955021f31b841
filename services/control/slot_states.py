"""The states a slot is in, as the ResourceManager and a TaskExecutor's slot table keep them.

They live apart from both reducers because the query surface (`queries.py`) answers with them
too: the reducers import the query records, so the records cannot import the reducers."""

from __future__ import annotations

from enum import StrEnum, nonmember
from typing import ClassVar


class SlotState(StrEnum):
    """A TaskExecutor's slot as the ResourceManager sees it."""

    wire_namespace: ClassVar[str] = nonmember("jobledger.services.resource_manager")
    """Where snapshots named it before it moved here from `resource_manager`: a moved type
    keeps its wire name (services/host/snapshot_format.py `_namespace`); `nonmember`, or the
    enum would take it for a slot state."""

    FREE = "FREE"
    PENDING = "PENDING"
    ALLOCATED = "ALLOCATED"
    OCCUPIED = "OCCUPIED"


class TaskSlotState(StrEnum):
    """A slot in a TaskExecutor's slot table (a slot exists there only while allocated)."""

    wire_namespace: ClassVar[str] = nonmember("jobledger.services.task_slot_table")
    """Where snapshots named it before it moved here from `task_slot_table`."""

    ALLOCATED = "ALLOCATED"
    ACTIVE = "ACTIVE"
    RELEASING = "RELEASING"
