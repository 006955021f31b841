"""Replay: rebuild every reducer's state from the log, up to a point, and check that the
decisions recorded in the log are exactly those the reducers derive again.

Each record goes to its owner in the reducer copy of its own partition, as live; the decisions
it derives are already in the log, so replay does not feed them back. A record the services
dead-lettered (the dead letter names its topic, partition and offset) reached no reducer live
and reaches none here. Partitions are independent, so any order that keeps each partition's
offsets in order rebuilds the same state.

An input whose reducing raises is left out as the services leave it out (`poison.py`): live,
they dead-letter it and the dead letter names it; where the log holds no dead letter of it
(the services have not reached it, or ran other reducers), the partition is reduced again
without it, so no half-applied input stays in the state, and replay says where.

`verify` re-derives every decision; given a keyring, it also checks, offline, the signature of
every input the services admitted, as they checked it live (`SignatureCheck`). Plain replay
checks no signature: what the services admitted they had checked already.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from jobledger.schemas import Event
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import (
    DECIDING_PRODUCERS,
    PartitionedDriver,
    ReducerDriver,
    same_decision,
)
from jobledger.services.host.gc_policy import bulk_replay
from jobledger.services.host.parallel import run_groups
from jobledger.services.host.poison import infrastructure, reduce_skipping
from jobledger.services.signing import UNSIGNED, Keyring, Signer

from .log_file import LogRecord


@dataclass
class ReplayResult:
    partitioned: PartitionedDriver
    records: int = 0
    """How many inputs reached a reducer."""
    raised: list[str] = field(default_factory=list)
    """Where an input raised, and why (`position: reason`): left out of the state."""

    @property
    def driver(self) -> ReducerDriver:
        """The state of the whole cluster (every partition's owners together)."""
        return self.partitioned.merged()


def position(record: LogRecord) -> str:
    return f"{record.role.value}/{record.partition}@{record.offset}"


def dead_lettered(records: Iterable[LogRecord]) -> set[tuple[str, int, int]]:
    """(topic role, partition, offset) of every input the services refused: the dead letters
    on the dead-letter topic only (a `DeadLettered` forged onto an input topic is an input that
    is itself dead-lettered, and names nothing)."""
    return {
        (_role_of(record.event.source_topic), record.event.source_partition,
         record.event.source_offset)
        for record in records
        if record.role is TopicRole.DEAD_LETTER and isinstance(record.event, DeadLettered)
    }  # fmt: skip


def _role_of(topic: str) -> str:
    """The role of `<prefix><role>`, whatever the prefix."""
    return next((role.value for role in TopicRole if topic.endswith(role.value)), topic)


def _inputs(
    records: list[LogRecord], refused: set[tuple[str, int, int]] | None = None
) -> Iterable[LogRecord]:
    """The records the services' reducers saw: input topics, less what was dead-lettered
    (`refused`: the dead letters of the whole log, when `records` is only a cut of it)."""
    refused = dead_lettered(records) if refused is None else refused
    for record in records:
        if record.role is not TopicRole.DEAD_LETTER and (
            (record.role.value, record.partition, record.offset) not in refused
        ):
            yield record


def replay(
    records: Iterable[LogRecord],
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
    watch: Callable[[Iterable[LogRecord]], Iterable[LogRecord]] = lambda inputs: inputs,
    refused: set[tuple[str, int, int]] | None = None,
    jobs: int = 1,
) -> ReplayResult:
    """The state the records lead to (a whole log, or a cut of it: `positions.cut`, whose
    `refused` names the inputs the whole log dead-lettered, a dead letter being appended
    after its input); `watch` sees the inputs go by (a progress display). With `jobs` > 1
    the partitions are replayed in that many worker processes (`parallel.run_groups`), to the
    same state; `watch` then sees them as they are handed out."""
    log = list(records)
    by_partition: dict[tuple[TopicRole, int], list[LogRecord]] = {}
    admitted = 0
    for record in watch(_inputs(log, refused)):
        by_partition.setdefault((record.role, record.partition), []).append(record)
        admitted += 1

    def replay_group(
        keys: list[tuple[TopicRole, int]],
    ) -> dict[tuple[TopicRole, int], tuple[ReducerDriver, list[str]]]:
        return {key: _reduce(driver_factory, by_partition[key]) for key in keys}

    sizes = {key: len(events) for key, events in by_partition.items()}
    reduced = sorted(run_groups(sizes, replay_group, jobs).items())
    drivers = {key: driver for key, (driver, _) in reduced}
    raised = [where for _, (_, wheres) in reduced for where in wheres]
    partitioned = PartitionedDriver(driver_factory, drivers)
    return ReplayResult(partitioned, admitted, raised)


def _reduce(
    driver_factory: Callable[[], ReducerDriver], records: list[LogRecord]
) -> tuple[ReducerDriver, list[str]]:
    """One partition's state after `records`, less those whose reducing raises, and where
    those are (`position: reason`)."""
    driver, skipped = reduce_skipping(
        driver_factory(), driver_factory, records, lambda d, r: d.process(r.event)
    )
    return driver, [f"{position(records[i])}: {why}" for i, why in sorted(skipped.items())]


@dataclass(frozen=True)
class Divergence:
    """The first place where the log and a fresh derivation disagree."""

    where: str
    event_id: str
    recorded: Event | None
    derived: Event | None

    def describe(self) -> str:
        if self.recorded is None:
            kind = self.derived.type_name()
            return f"{self.where}: derived {kind} {self.event_id} is not in the log"
        if self.derived is None:
            return (
                f"{self.where}: recorded {self.recorded.type_name()} {self.event_id} was not "
                "derived by any reducer"
            )
        return (
            f"{self.where}: {self.recorded.type_name()} {self.event_id} differs\n"
            f"  recorded: {self.recorded.model_dump(mode='json')}\n"
            f"  derived:  {self.derived.model_dump(mode='json')}"
        )


@dataclass(frozen=True)
class SignatureRefused:
    """An input the services admitted that they should have refused: its signature is not the
    keyring's, or its signer may not write it."""

    where: str
    reason: str
    """`Keyring.check`'s, or `ReducerDriver.admit`'s."""
    signed: bool = False
    """The signature held; the signer may not write it."""

    def describe(self) -> str:
        if self.signed:
            return f"{self.where}: admitted, but its signer may not write it: {self.reason}"
        return f"{self.where}: admitted, but the keyring refuses its signature: {self.reason}"


@dataclass
class SignatureCheck:
    """The signature of each input the services admitted, checked against `keyring` as the
    services check it live (`transaction_loop.ServiceRuntime._admit`), and whether its signer
    may write it (`ReducerDriver.admit`, with the submitters the log binds): every one but an
    owner's own decision coming back to it, which its owner knows by what it is. A record the
    services dead-lettered changed nothing and is not checked; one they have not consumed yet
    they have not judged yet."""

    keyring: Keyring
    checked: int = 0
    """How many signatures held."""

    def signer(self, record: LogRecord) -> Signer | str:
        """Who signed `record`, or why the keyring refuses it (`Keyring.check`)."""
        signed = record.provenance
        return UNSIGNED if signed is None else signed.check(self.keyring, record.timestamp)

    def refusal(self, record: LogRecord, owner: ReducerDriver) -> SignatureRefused | None:
        """Why `record`, about to reach `owner` (its partition's driver), should not have, or
        None."""
        if owner.awaited(record.event):
            return None
        signer = self.signer(record)
        if isinstance(signer, str):
            return SignatureRefused(position(record), signer)
        reason = owner.admit(record.event, signer.principal, signer.role, self.keyring.owners())
        if reason is not None:
            return SignatureRefused(position(record), reason, signed=True)
        self.checked += 1
        return None


@dataclass
class Resumed:
    """Where the verification of a log that retention cut starts: each input partition whose
    beginning is deleted starts from the services' snapshot of it (the offset it reflects
    and how to build its state, again each time it is asked), the others from offset 0.

    A decision is written after its cause, and retention deletes by age, so of a cause older
    than the newest first record of the cut partitions (`horizon`, a broker timestamp) the
    decision may be deleted while the cause is still held: its absence is counted in
    `deleted`, not taken for a divergence. A decision of a later cause is held, or missing."""

    starts: dict[tuple[TopicRole, int], tuple[int, Callable[[], ReducerDriver]]]
    horizon: int = -1
    deleted: int = 0
    """Derived decisions not found, their records older than the horizon."""

    def start_of(self, record: LogRecord) -> int:
        return self.starts.get((record.role, record.partition), (0, None))[0]


def verify(
    records: Iterable[LogRecord],
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
    processed: Callable[[LogRecord], bool] = lambda _: True,
    signatures: SignatureCheck | None = None,
    whole: Callable[[LogRecord], bool] = lambda _: True,
    resumed: Resumed | None = None,
) -> tuple[int, Divergence | SignatureRefused | None]:
    """Re-derive every decision; returns how many matched, and the first divergence if any
    (with `signatures`, the first admitted input whose signature is refused, if it comes
    first).

    `processed` says whether the services have consumed an input yet (its offset is below
    their group's committed offset): a decision of an input still waiting for them is not
    missing, only not due yet, and is not a divergence.

    `whole` says whether an input's owner has all of its inputs in `records`: only those
    owners' decisions are re-derived and compared (an archived job's story holds all of its
    JobMaster's inputs, and of the cluster's owners only the records the job rests on).

    `resumed`: the log is what retention left of it, verified from the snapshots."""
    log = list(records)
    with bulk_replay():
        return _verify(log, driver_factory, processed, signatures, whole, resumed or Resumed({}))


def _verify(
    log: list[LogRecord],
    driver_factory: Callable[[], ReducerDriver],
    processed: Callable[[LogRecord], bool],
    signatures: SignatureCheck | None,
    whole: Callable[[LogRecord], bool],
    resumed: Resumed,
) -> tuple[int, Divergence | SignatureRefused | None]:
    admitted = [r for r in _inputs(log) if r.offset >= resumed.start_of(r)]
    recorded: dict[str, list[LogRecord]] = {}
    for r in log:
        recorded.setdefault(r.event.event_id, []).append(r)
    driver = PartitionedDriver(
        driver_factory, {key: state() for key, (_, state) in resumed.starts.items()}
    )
    reduced: dict[tuple[TopicRole, int], list[LogRecord]] = {}
    derived_ids: set[str] = set()
    matched = 0
    for record in admitted:
        if signatures is not None and processed(record):
            refused = signatures.refusal(record, driver.driver_of(record.role, record.partition))
            if refused is not None:
                return matched, refused
        fresh = resumed.starts.get((record.role, record.partition), (0, driver_factory))[1]
        decisions = _decisions(driver, reduced, record, fresh)
        for decision in decisions if whole(record) else ():
            derived_ids.add(decision.event_id)
            # ids derive from the cause's id, which a client chose: two inputs with one id
            # on two partitions derive two decisions with one id, so any of them may match
            candidates = recorded.get(decision.event_id, [])
            if not candidates and not processed(record):
                continue
            if not candidates and record.timestamp < resumed.horizon:
                resumed.deleted += 1
                continue
            if not any(same_decision(decision, found.event) for found in candidates):
                found = candidates[0] if candidates else None
                return matched, Divergence(
                    position(found or record), decision.event_id,
                    found.event if found else None, decision,
                )  # fmt: skip
            matched += 1
    causes = {record.event.event_id: record for record in admitted}
    for record, caused_in_log in _claimed_decisions(admitted):
        cause = causes.get(record.event.cause_event_id or "")
        if caused_in_log and whole(cause) and record.event.event_id not in derived_ids:
            event = record.event
            return matched, Divergence(position(record), event.event_id, event, None)
    return matched, None


def _decisions(
    driver: PartitionedDriver,
    reduced: dict[tuple[TopicRole, int], list[LogRecord]],
    record: LogRecord,
    driver_factory: Callable[[], ReducerDriver],
) -> list[Event]:
    """What `record` derives at its partition's reducers (`reduced`: the records each
    partition has reduced so far). One whose reducing raises derives nothing and its partition
    is reduced again without it, as the services leave it out (`poison.py`)."""
    key = (record.role, record.partition)
    done = reduced.setdefault(key, [])
    try:
        decisions = driver.process(record.role, record.partition, record.event)
    except Exception as exc:
        if infrastructure(exc):
            raise
        driver.drivers[key], _ = _reduce(driver_factory, done)
        return []
    done.append(record)
    return decisions


def _claimed_decisions(admitted: list[LogRecord]) -> Iterator[tuple[LogRecord, bool]]:
    """The admitted records in a reducer's name, each with whether its cause is an admitted
    record of the log (a decision some reducer could have derived) or not (foreign)."""
    ids = {record.event.event_id for record in admitted}
    for record in admitted:
        if record.event.producer in DECIDING_PRODUCERS:
            yield record, record.event.cause_event_id in ids


def foreign(records: Iterable[LogRecord]) -> list[LogRecord]:
    """Records in a reducer's name whose cause is no input of the log: no reducer could have
    derived them, so something else wrote them under the services' name (refused at
    `jobledger produce`; only a raw Kafka client can). The services took them for inputs, and
    so does replay; `verify` reports them apart, since they say nothing about determinism."""
    admitted = list(_inputs(list(records)))
    return [record for record, caused_in_log in _claimed_decisions(admitted) if not caused_in_log]
