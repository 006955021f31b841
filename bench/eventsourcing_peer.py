"""The peer of bench/replay.py: the same events in pyeventsourcing's (`eventsourcing`, PyPI)
SQLite event store, one aggregate per owner (each job, each TaskExecutor, the
ResourceManager: the partition keys jobledger's reducers own), and replayed the way that
library replays, `repository.get` of every aggregate: its stored events read, decoded from
JSON and applied in order.

The aggregate's state is a count of events by type: the peer does less per event than
jobledger's reducers (which run Flink's rules), so the comparison favours it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jobledger.schemas import Event


def _application(db: Path) -> Any:
    """An eventsourcing Application on a SQLite file (its settings are read from the
    environment when the application is made)."""
    os.environ["PERSISTENCE_MODULE"] = "eventsourcing.sqlite"
    os.environ["SQLITE_DBNAME"] = str(db)
    from eventsourcing.application import Application

    return Application()


def _owner_class() -> type:
    from eventsourcing.domain import Aggregate, event

    class Owner(Aggregate):
        """Everything one partition key owns, as one aggregate."""

        @staticmethod
        def create_id(key: str) -> uuid.UUID:
            return uuid.uuid5(uuid.NAMESPACE_URL, key)

        @event("Opened")
        def __init__(self, key: str) -> None:
            self.key = key
            self.seen: dict[str, int] = {}

        @event("Recorded")
        def record(self, type_name: str, fields: dict[str, Any]) -> None:
            self.seen[type_name] = self.seen.get(type_name, 0) + 1

    return Owner


class Peer:
    """The peer's store, filled batch by batch while the log is generated."""

    def __init__(self, db: Path) -> None:
        self.app = _application(db)
        self.owner_class = _owner_class()
        self.owners: dict[str, Any] = {}
        self.ids: list[uuid.UUID] = []
        self.events = 0

    def append(self, batch: Iterable[Event]) -> None:
        """Record each event on its owner's aggregate and save the touched aggregates."""
        touched: dict[str, Any] = {}
        for event in batch:
            role, key = event.route()
            owner_key = f"{role.value}/{key}"
            owner = self.owners.get(owner_key)
            if owner is None:
                owner = self.owners[owner_key] = self.owner_class(owner_key)
                self.ids.append(owner.id)
                self.events += 1
            owner.record(event.type_name(), event.model_dump(mode="json"))
            touched[owner_key] = owner
            self.events += 1
        self.app.save(*touched.values())

    def replay(self) -> int:
        """Every aggregate rebuilt from the store; how many stored events that read. The
        aggregates the writes kept alive are dropped first, so every replay, the first or a
        repeat, reads all of them back from the store (by the ids kept as they were made)."""
        self.owners.clear()
        return sum(self.app.repository.get(owner_id).version for owner_id in self.ids)
