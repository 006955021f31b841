"""What retention left of the log, and where its verification starts: each input partition
whose beginning the broker deleted starts from the services' snapshot of it, which must
reflect every record deleted (retention.py makes it so while the services run; a partition
the snapshot does not reach is said, not verified wrongly)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from jobledger.schemas import topic_name
from jobledger.schemas.topics import INPUT_ROLES, TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.host import snapshot
from jobledger.services.host.retention import within_held

from .log_file import LogRecord
from .replay import Resumed


class DeletedBeforeSnapshot(ValueError):
    """An input partition's beginning is deleted and no snapshot reflects all of it."""


def resumed(
    records: Iterable[LogRecord],
    oldest_held: dict[tuple[TopicRole, int], int],
    snapshots: dict[str, bytes],
    prefix: str,
) -> Resumed | None:
    """Where to verify `records` from, given each partition's oldest held offset and the
    services' latest snapshots (owner -> encoded); None where no partition is cut."""
    cut = {key: low for key, low in oldest_held.items() if low > 0}
    if not cut:
        return None
    starts: dict[tuple[TopicRole, int], tuple[int, Callable[[], ReducerDriver]]] = {}
    for (role, partition), low in sorted(cut.items()):
        if role not in INPUT_ROLES:
            continue
        owner = f"{topic_name(role, prefix)}/{partition}"
        data = snapshots.get(owner)
        taken = snapshot.decode_or_rebuild(data, owner) if data else None
        if taken is None or not within_held(taken.next_offset, low):
            at = "no snapshot" if taken is None else f"its snapshot reflects {taken.next_offset}"
            raise DeletedBeforeSnapshot(
                f"{role.value}/{partition}: the broker deleted its records before offset "
                f"{low} and {at}: the records in between are lost, and the state after them "
                "cannot be verified (a retention shorter than the snapshots guarantee, or "
                "services stopped longer than the retention)"
            )
        starts[(role, partition)] = (taken.next_offset, _state_of(data))
    firsts: dict[tuple[TopicRole, int], int] = {}
    for record in records:
        key = (record.role, record.partition)
        if key in cut and key not in firsts:
            firsts[key] = record.timestamp
    return Resumed(starts, max(firsts.values(), default=-1))


def _state_of(data: bytes) -> Callable[[], ReducerDriver]:
    """The snapshot's state, decoded anew each time (replay reduces it in place)."""
    return lambda: snapshot.decode(data).driver
