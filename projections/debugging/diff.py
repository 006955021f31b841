"""What changed in every reducer's state between two points of the log: jobs, executions,
slots, requests, KvState locations, each as added, removed or changed, by its path in the
replayed state (`ReducerDriver.to_dict()`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    path: str
    kind: str
    """`added`, `removed` or `changed`."""
    before: Any = None
    after: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "before": self.before, "after": self.after}

    def line(self) -> str:
        if self.kind == "added":
            return f"+ {self.path}: {_short(self.after)}"
        if self.kind == "removed":
            return f"- {self.path}: {_short(self.before)}"
        return f"~ {self.path}: {_short(self.before)} -> {_short(self.after)}"


ID_KEYS = ("attempt_id", "slot_request_id", "allocation_id", "resource_id", "index")
"""Fields that name the items of a list in the state (an attempt, a request, a slot): such a
list is compared item by item, by that name, instead of as one value."""


def _key_of(*lists: Any) -> str | None:
    """The first ID_KEYS field that names every record of every list, non-null and unique
    within each list (one key for both sides, so an item keeps its name across the diff)."""
    if not all(isinstance(items, list) and items is not None for items in lists):
        return None
    records = [i for items in lists for i in items]
    if not records or not all(isinstance(i, dict) for i in records):
        return None
    for key in ID_KEYS:
        if all(i.get(key) is not None for i in records) and all(
            len({str(i[key]) for i in items}) == len(items) for items in lists
        ):
            return key
    return None


def diff(before: Any, after: Any, path: str = "") -> list[Change]:
    """Every difference between two plain-data states, in key order. Mappings are compared
    key by key, lists of named records record by record, anything else as one value."""
    key = _key_of(before, after)
    if key is not None:
        before = {str(i[key]): i for i in before}
        after = {str(i[key]): i for i in after}
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in sorted(set(before) | set(after), key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in after:
                changes.append(Change(here, "removed", before=before[key]))
            elif key not in before:
                changes.append(Change(here, "added", after=after[key]))
            else:
                changes.extend(diff(before[key], after[key], here))
        return changes
    return [] if before == after else [Change(path, "changed", before, after)]


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
