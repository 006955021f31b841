"""Splitting the scheduler out of the JobMaster changed no event and no event id: every
scenario of tests/scheduler_golden.py derives, event for event and field for field, the log
(and the state) recorded on the code before the split. The golden was re-recorded once after
the split, for the fix of a slot completion told twice (only job-69 and the REDELIVERED
seeds changed), and for Flink behaviours of issue 17 (each commit names what it changed)."""

from __future__ import annotations

import gzip
import json
from itertools import zip_longest

from .scheduler_golden import GOLDEN, records


def test_every_event_is_derived_whole_as_the_golden_recorded_it():
    golden = [json.loads(line) for line in gzip.decompress(GOLDEN.read_bytes()).splitlines()]
    derived = (json.loads(json.dumps(record)) for record in records())
    for n, (want, got) in enumerate(zip_longest(golden, derived)):
        assert got == want, f"record {n} ({(want or got)['scenario']}) differs"
    assert len(golden) > 10_000
