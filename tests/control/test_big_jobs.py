"""A job's log grows with its subtasks, not with their square. A deployment names
the producers of each input as one ConsumedPartitionGroup (a range), so no event grows with
the parallelism; deployments that listed the producers one by one (TaskDeploymentRequested
v1 to v3) still decode, as their group, and an old log of them replays exactly."""

from __future__ import annotations

import io
import json

import pytest
from fastavro import parse_schema, schemaless_writer

from jobledger.projections.log.replay import verify
from jobledger.schemas import Event, EventSerde
from jobledger.schemas.catalog import HISTORY_DIR, schema_fingerprint
from jobledger.schemas.serde import SINGLE_OBJECT_MAGIC
from jobledger.schemas.slots import SlotRequestTimedOut
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import (
    ConsumedPartitionGroup,
    DistributionPattern,
    ExecutionState,
    InputGateDeploymentDescriptor,
    OwnerKind,
    ResultPartitionType,
    ScheduleMode,
)
from jobledger.services.client.dispatcher import now_ms
from jobledger.services.control import failover_strategy, scheduling_strategy
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.scheduler import Scheduler

from ..support.golden_logs import as_log
from ..support.jobs import JOB, JobCluster, fixed_delay, vertex

SERDE = EventSerde()


def all_to_all_log(parallelism: int) -> list[Event]:
    """A source -> sink ALL_TO_ALL job of `parallelism` x `parallelism`, deployed and run to
    FINISHED by the stand-in runner, on TaskExecutors of 8 slots: its deployments go a
    window at a time, each answered as it comes (a round per window at most)."""
    cluster = JobCluster(task_executors=-(-2 * parallelism // 8), slots=8)
    cluster.submit(
        [
            vertex("source", parallelism),
            vertex("sink", parallelism, ("source", "ALL_TO_ALL", "PIPELINED")),
        ]
    )
    cluster.play(rounds=2 * parallelism)
    assert cluster.statuses()[-1] == "FINISHED"
    return cluster.log


def test_bytes_per_subtask_stay_flat_from_100_to_5000_subtasks():
    """The whole log of the job (registrations, slots, deployments, reports), encoded as the
    services write it, per subtask: 5,000 x 5,000 within 1.5x of 100 x 100 (listing every
    producer in each deployment made it 25x), and no event larger at 5,000 than at 100
    beyond the digits of its numbers."""
    per_subtask, largest = {}, {}
    for p in (100, 5000):
        sizes = [len(SERDE.encode(event, "t")) for event in all_to_all_log(p)]
        per_subtask[p] = sum(sizes) / (2 * p)
        largest[p] = max(sizes)
    assert per_subtask[5000] <= 1.5 * per_subtask[100], per_subtask
    assert largest[5000] <= largest[100] + 64, largest


def gate_of(listed: list[int]) -> dict:
    return {"source_vertex_id": "source", "distribution_pattern": "ALL_TO_ALL",
            "result_partition_type": "PIPELINED", "consumed_subtask_indexes": listed}  # fmt: skip


def written_with(version: int, deployment: TaskDeploymentRequested) -> bytes:
    """`deployment` as a writer of TaskDeploymentRequested `version` put it on the log: its
    inputs' producers listed one by one, and none of the fields added after `version`."""
    schema = json.loads((HISTORY_DIR / f"jobledger.TaskDeploymentRequested.v{version}.avsc")
                        .read_text())  # fmt: skip
    parsed = parse_schema(schema)
    record = json.loads(deployment.model_dump_json())
    record["inputs"] = [gate_of(list(gate.consumed_subtasks)) for gate in deployment.inputs]
    names = {f["name"] for f in schema["fields"]}
    record = {k: v for k, v in record.items() if k in names}
    body = io.BytesIO()
    schemaless_writer(body, parsed, record)
    return SINGLE_OBJECT_MAGIC + schema_fingerprint(parsed) + body.getvalue()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_deployment_listing_its_producers_decodes_as_their_group(version):
    [deployment] = [
        e
        for e in all_to_all_log(3)
        if isinstance(e, TaskDeploymentRequested) and e.vertex_id == "sink"
    ][:1]
    decoded = SERDE.decode(written_with(version, deployment), "t")
    [gate] = decoded.inputs
    assert gate == InputGateDeploymentDescriptor(
        source_vertex_id="source", distribution_pattern=DistributionPattern.ALL_TO_ALL,
        result_partition_type=ResultPartitionType.PIPELINED, consumed_subtask_indexes=[],
        consumed_partition_group=ConsumedPartitionGroup(first_subtask_index=0,
                                                        number_of_subtasks=3),
    )  # fmt: skip
    if version == 3:
        assert decoded == deployment, "v3 lacks no field: the old record is today's decision"


def test_producers_listed_out_of_range_order_stay_listed():
    """Nothing jobledger wrote, but nothing read is lost: a list that is no range is kept."""
    gate = InputGateDeploymentDescriptor.model_validate_json(json.dumps(gate_of([0, 2, 1])))
    assert gate.consumed_partition_group is None
    assert list(gate.consumed_subtasks) == [0, 2, 1]
    ranged = InputGateDeploymentDescriptor.model_validate_json(json.dumps(gate_of([2, 3])))
    assert ranged.consumed_partition_group == ConsumedPartitionGroup(
        first_subtask_index=2, number_of_subtasks=2
    )


def test_an_old_log_of_listed_producers_replays_and_verifies():
    """A log whose deployments a writer before v4 wrote (producers listed) is read back and
    every decision derived again equals the one recorded, the deployments among them."""
    log = all_to_all_log(4)
    reread = [
        SERDE.decode(written_with(3, e) if isinstance(e, TaskDeploymentRequested)
                     else SERDE.encode(e, "t"), "t")
        for e in log
    ]  # fmt: skip
    deployments = sum(isinstance(e, TaskDeploymentRequested) for e in reread)
    matched, divergence = verify(as_log(reread))
    assert divergence is None
    assert deployments == 8 and matched > deployments


def test_one_timer_failing_many_regions_reads_the_graphs_shape_once(monkeypatch):
    """A TimerFired times out the slot requests of 60 subtasks of one vertex (each its own
    region, each failure its own restart): the graph's blocks and regions are made once and
    kept, not once per failure (else a vertex of 13,000 keeps the reducers busy for minutes,
    each failure asking every waiting restart whether it is due), and each
    subtask's restart waits for its own delay."""
    made, asked = [], []
    blocks = failover_strategy._blocks
    monkeypatch.setattr(failover_strategy, "_blocks", lambda g: made.append(1) or blocks(g))
    due = Scheduler._due
    monkeypatch.setattr(Scheduler, "_due", lambda s, r, now: asked.append(1) or due(s, r, now))
    cluster = JobCluster(task_executors=1, slots=4,
                         config=JobMasterConfig(slot_request_timeout_ms=100))  # fmt: skip
    cluster.submit([vertex("source", 64)], restart=fixed_delay(1000, 50))
    cluster.play(rounds=1)
    fired = cluster.run([cluster.clock(TimerFired, at=cluster.clock.now + 200,
                                       scope=OwnerKind.JOB, owner_id=JOB)])  # fmt: skip
    assert sum(isinstance(e, SlotRequestTimedOut) for e in fired) == 60
    assert len(made) == 1
    assert len(asked) <= 2 * 60, "each waiting restart asked about once per input, not per failure"
    pending = cluster.jm.scheduler.pending_restarts
    assert sorted(k for r in pending for k in r.versions) == [("source", i) for i in range(4, 64)]


def test_regions_of_a_blocking_all_to_all_edge_are_ordered_through_one_node_per_block(
    monkeypatch,
):
    """P producers and P consumers of a BLOCKING ALL_TO_ALL edge, each its own region: the
    regions' dependencies are 2P arcs through the block (P^2 region to region: a region
    failover of 2,000 x 2,000 took 13 s), and the regions come out as before."""
    arcs = []
    cycles = failover_strategy._cycles
    monkeypatch.setattr(failover_strategy, "_cycles", lambda a: arcs.append(len(a)) or cycles(a))
    cluster = JobCluster(task_executors=10, slots=8)
    cluster.submit([vertex("source", 40), vertex("sink", 40, ("source", "ALL_TO_ALL", "BLOCKING"))])
    regions = failover_strategy.pipelined_regions(cluster.jm.scheduler.graph)
    assert arcs == [80]
    assert sorted(regions.values()) == list(range(80))


def graph(job_id: str, parallelism: int, config_bytes: int = 0) -> dict:
    """A source -> sink ALL_TO_ALL JobGraph as JSON; the sink's operator carries a
    configuration of `config_bytes` characters, which every one of its deployments repeats."""
    operator = {"name": "noop", "config": {"blob": "x" * config_bytes}}
    return {
        "type": "JobSubmitted", "job_id": job_id, "job_name": job_id,
        "vertices": [
            {"vertex_id": "source", "name": "source", "invokable_class_name": "noop",
             "parallelism": parallelism},
            {"vertex_id": "sink", "name": "sink", "invokable_class_name": "noop",
             "parallelism": parallelism, "operators": [operator],
             "inputs": [{"source_vertex_id": "source", "distribution_pattern": "ALL_TO_ALL"}]},
        ],
    }  # fmt: skip


SUBTASKS_REFUSAL = "invalid JobGraph: 60000 subtasks exceed the limit of 50000 " + (
    "(jobledger.job.max-subtasks)"
)


def test_job_submit_refuses_a_jobgraph_beyond_the_limits_it_is_given():
    from jobledger.services.client.dispatcher import JobGraphRefused, check_job_graph
    from jobledger.services.configuration import Configuration

    with pytest.raises(JobGraphRefused, match=r"^invalid JobGraph: 60000 subtasks exceed the "
                       r"limit of 50000 \(jobledger.job.max-subtasks\)$"):  # fmt: skip
        check_job_graph(graph("big", 30_000), "cli", SERDE, "p.")
    limits = Configuration.parse(["jobledger.job.max-subtasks=100"]).job_limits()
    with pytest.raises(JobGraphRefused, match="120 subtasks exceed the limit of 100"):
        check_job_graph(graph("small", 60), "cli", SERDE, "p.", limits=limits)
    assert check_job_graph(graph("small", 50), "cli", SERDE, "p.", limits=limits).event


@pytest.mark.broker
def test_a_jobsubmitted_beyond_the_limits_written_with_produce_is_refused_with_its_reason(
    cluster, tmp_path, capsys
):
    """Straight to Kafka with `jobledger produce` (which checks events, not what a JobGraph
    costs): one JobGraph of 60,000 subtasks and one whose deployments would repeat a 20 kB
    operator configuration 10,000 times (300 MB) are each refused by the JobMaster with the
    reason, nothing derived from them; a small one beside them runs."""
    from jobledger.cli import main
    from jobledger.schemas.jobs import JobStatusChanged
    from jobledger.schemas.rejections import EventRejected

    from ..support.runtime_harness import RuntimeThread, wait_until_decided

    lines = [graph("too-many", 30_000), graph("too-costly", 10_000, 30_000), graph("fine", 2)]
    for n, line in enumerate(lines):
        line.update(event_id=f"submitted-{n}", event_time=now_ms(), producer="test")
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with RuntimeThread(cluster) as runtime:
        argv = ["produce", str(path), "--bootstrap", cluster.bootstrap,
                "--topic-prefix", cluster.prefix]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        records = wait_until_decided(cluster)
        assert runtime.failure is None, runtime.failure
    rejected = {r.event.owner_id: r.event.reason for r in records
                if isinstance(r.event, EventRejected)}  # fmt: skip
    assert rejected["too-many"] == SUBTASKS_REFUSAL
    assert rejected["too-costly"].startswith(
        "invalid JobGraph: its deployments would put about 307840000 bytes on the log, over "
        "the limit of 268435456 (jobledger.job.max-deployment-bytes)"
    )
    decided = {r.event.job_id for r in records if isinstance(r.event, JobStatusChanged)}
    assert decided == {"fine"}


def test_a_pipelined_producer_finishing_after_it_ran_asks_no_consumer_again(monkeypatch):
    """LAZY_FROM_SOURCES: a PIPELINED input became consumable when its producers ran; their
    FINISHED changes nothing for the consumers, which are not asked again (each FINISHED
    scanned all P producers once more: P^2, 2.4 s of a 4,000 x 4,000 job's end)."""
    asked = []
    ready = scheduling_strategy._producers_ready
    monkeypatch.setattr(scheduling_strategy, "_producers_ready",
                        lambda g, e: asked.append(e) or ready(g, e))  # fmt: skip
    cluster = JobCluster(task_executors=10, slots=8)
    sink = vertex("sink", 40, ("source", "ALL_TO_ALL", "PIPELINED"))
    cluster.submit([vertex("source", 40), sink], mode=ScheduleMode.LAZY_FROM_SOURCES)
    sources = cluster.deployments()
    for d in sources:
        cluster.report(d.execution_attempt_id, ExecutionState.INITIALIZING)
        cluster.report(d.execution_attempt_id, ExecutionState.RUNNING)
    assert len(cluster.deployments()) == 80, "the sinks are deployed once every source runs"
    asked.clear()
    for d in sources:
        cluster.report(d.execution_attempt_id, ExecutionState.FINISHED)
    assert asked == []
