"""The scheduler decides as the golden says: every scenario of tests/support/scheduler_golden.py
derives, event for event and field for field, the log (and the state) recorded in
tests/golden/scheduler.jsonl.gz, so a change that moves any event or event id shows here,
whole, with the scenario that moved it. The golden was first recorded before the scheduler
left the JobMaster, which is how that move was shown to change nothing; it is re-recorded only
for a behaviour meant to change, and the commit that re-records it names the behaviour and
the seeds it moved (`git log tests/golden/scheduler.jsonl.gz`)."""

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
