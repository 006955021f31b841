"""Splitting the scheduler out of the JobMaster changed no event and no event id: every
scenario of tests/support/scheduler_golden.py derives, event for event and field for field, the log
(and the state) recorded on the code before the split. The golden was re-recorded once after
the split, for the fix of a slot completion told twice (only job-69 and the REDELIVERED
seeds changed), for Flink behaviours of issue 17 (each commit names what it changed), and for
issue 42's iterative slot hand-over: the scheduler hears of a completion only once its
reaction to the one before is done, where a pool call made within a reaction used to tell it
of every completion not yet told (its own and the outer call's) in the middle of that
reaction. Six job seeds changed: in 69 three requests timed out at once and the first one
failed the job; its reaction cancelled the other two vertices (CANCELED, as in Flink, where
each timeout is its own main-thread message) instead of hearing their timeouts half-way
(FAILED). In 350, 553 and 579 a restart takes an available slot for one vertex and asks the
RM for another's before it deploys the first (Flink's allocateSlotsAndDeploy also requests
every slot first). In 545 and 754 a region cancelled within a reaction withdraws a waiting
request when it reaches its vertex, where the slot freed before it was handed through it.
Issue 44 re-recorded it once more: a deployment's input gate names its producers as one
range (`consumed_partition_group`), no longer one by one; the old golden, each gate read as
its range (`upcast_input_gate`), equals the new one record for record. Issue 45 re-recorded it
for the tenant a job counts against: `JobSubmitted` and `SlotRequested` carry `principal`, null
in every scenario; the old golden, each of those read with it null (its Avro default), equals
the new one record for record."""

from __future__ import annotations

import gzip
import json
from itertools import zip_longest

from ..support.scheduler_golden import GOLDEN, records


def test_every_event_is_derived_whole_as_the_golden_recorded_it():
    golden = [json.loads(line) for line in gzip.decompress(GOLDEN.read_bytes()).splitlines()]
    derived = (json.loads(json.dumps(record)) for record in records())
    for n, (want, got) in enumerate(zip_longest(golden, derived)):
        assert got == want, f"record {n} ({(want or got)['scenario']}) differs"
    assert len(golden) > 10_000
