"""The states a slot is in, as the ResourceManager and a TaskExecutor's slot table keep them.

They live apart from both reducers because the query surface (`queries.py`) answers with them
too: the reducers import the query records, so the records cannot import the reducers."""

from __future__ import annotations

from enum import StrEnum


class SlotState(StrEnum):
    """A TaskExecutor's slot as the ResourceManager sees it."""

    FREE = "FREE"
    PENDING = "PENDING"
    ALLOCATED = "ALLOCATED"
    OCCUPIED = "OCCUPIED"


class TaskSlotState(StrEnum):
    """A slot in a TaskExecutor's slot table (a slot exists there only while allocated)."""

    ALLOCATED = "ALLOCATED"
    ACTIVE = "ACTIVE"
    RELEASING = "RELEASING"
