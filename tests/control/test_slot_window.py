"""A job keeps a bounded window of slot requests at the ResourceManager, so that a giant job
does not hold back the others.

The ResourceManager's one partition serves every job's requests in log order: a giant job
that sent all its requests at once put a small job's request behind all of them, and every
hop after it behind the giant's allocations and offers. The pool now keeps at most
`jobledger.slot-pool.max-pending-requests` requests at the ResourceManager; the rest wait in
the pool, in order, and each answer lets the next one go."""

from __future__ import annotations

from jobledger.schemas.cluster import ResourceManagerConnected, TaskManagerRegistered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.slots import (
    SlotOfferAccepted,
    SlotOffered,
    SlotRequested,
    SlotRequestFulfilled,
)
from jobledger.schemas.types import RestartStrategy, ScheduleMode
from jobledger.services.configuration import Configuration
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.slot_pool import SlotPoolConfig

from ..support.events import ANY_VALUE, Clock, assert_derived, derived_from, expect, profile
from ..support.jobs import JM, JOB, JobCluster, vertex

WINDOW = JobMasterConfig(pool=SlotPoolConfig(max_pending_requests=3))


def test_a_job_sends_its_window_and_each_answer_sends_the_next_request():
    cluster = JobCluster(task_executors=0, config=WINDOW)
    cluster.submit([vertex("v", 8)])
    pool = cluster.jm.pool
    sent = [e for e in cluster.log if isinstance(e, SlotRequested)]
    assert len(sent) == 3 and len(pool.pending_requests) == 3
    held = list(pool.waiting_for_resource_manager.values())
    assert len(held) == 5
    cluster.run([cluster.clock(TaskManagerRegistered, resource_id="tm-0", address="tm-0:1",
                               number_of_slots=1,
                               resource_profile=profile(1.0, 1024))])  # fmt: skip
    offer = next(e for e in cluster.log if isinstance(e, SlotOffered))
    first = sent[0]
    assert offer.allocation_id == first.allocation_id
    assert_derived(derived_from(cluster.log, offer, "slotpool"), [
        expect(SlotOfferAccepted, job_id=JOB, job_master_id=JM, resource_id="tm-0",
               slot_index=0, allocation_id=first.allocation_id),
        expect(SlotRequestFulfilled, job_id=JOB, slot_request_id=first.slot_request_id,
               allocation_id=first.allocation_id, resource_id="tm-0", slot_index=0),
        expect(SlotRequested, job_id=JOB, job_master_id=JM,
               slot_request_id=held[0].slot_request_id, allocation_id=ANY_VALUE,
               resource_profile=held[0].resource_profile, batch_request=False,
               timeout_ms=ANY_VALUE, blocked_resource_ids=[]),
    ])  # fmt: skip
    assert list(pool.waiting_for_resource_manager.values()) == held[1:]


def test_a_small_job_s_request_waits_behind_at_most_the_giant_s_window():
    """In the ResourceManager's input order (the driver's queue stands for its partition), a
    small job submitted after a giant one finds no more than the window of the giant's
    requests ahead of its own: before the window, all of the giant's 2 x 400."""
    clock = Clock()
    driver = ReducerDriver(job_master_config=WINDOW)
    log = driver.run([clock(TaskManagerRegistered, resource_id=f"tm-{i}", address=f"tm-{i}:1",
                            number_of_slots=4, resource_profile=profile(1.0, 1024))
                      for i in range(201)])  # fmt: skip

    def submitted(job: str, parallelism: int) -> list:
        return [
            clock(JobSubmitted, job_id=job, job_name=job, schedule_mode=ScheduleMode.EAGER,
                  vertices=[vertex("a", parallelism), vertex("b", parallelism)],
                  restart_strategy=RestartStrategy()),
            clock(JobMasterLeadershipGranted, job_id=job, job_master_id=f"jm-{job}"),
            clock(ResourceManagerConnected, job_id=job, resource_manager_id="resourcemanager"),
        ]  # fmt: skip

    log = driver.run(submitted("giant", 400) + submitted("small", 1))
    requests = [e.job_id for e in log if isinstance(e, SlotRequested)]
    assert requests.index("small") <= 3
    assert requests.count("giant") == 800
    assert sum(isinstance(e, SlotOfferAccepted) for e in log) == 802


def test_the_window_is_an_option_and_zero_leaves_it_unbounded():
    config = Configuration.parse(["jobledger.slot-pool.max-pending-requests=0"])
    assert config.job_master().pool.max_pending_requests == 0
    assert Configuration.parse([]).job_master().pool.max_pending_requests == 100
    cluster = JobCluster(task_executors=0, config=config.job_master())
    cluster.submit([vertex("v", 8)])
    assert sum(isinstance(e, SlotRequested) for e in cluster.log) == 8
