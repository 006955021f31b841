"""The command line without a broker: help everywhere, argument checks, one-line errors,
schema commands, and `tail` over an exported file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fastavro import parse_schema, writer

from jobledger.cli import build_parser, main
from jobledger.cli.main import COMMANDS
from jobledger.cli.options import epoch_ms
from jobledger.projections.log.log_file import LogRecord, write_export
from jobledger.schemas import EVENTS_BY_NAME, event_from_json
from jobledger.schemas.jobs import JobCancellationRequested, JobMasterLeadershipGranted
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import OwnerKind
from jobledger.services.local.loopback import free_port

from ..support.events import Clock

SUBCOMMANDS = [
    ["broker"],
    ["topics"],
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["produce"],
    ["tail"],
    ["schemas"],
    ["schemas", "list"],
    ["schemas", "show"],
    ["schemas", "write"],
    ["services"],
    ["services", "run"],
    ["export"],
    ["replay"],
    ["history"],
    ["explain"],
    ["slots"],
    ["diff"],
    ["timeline"],
    ["job"],
    ["job", "submit"],
    ["job", "cancel"],
    ["job", "wait"],
    ["kvstate"],
    ["kvstate", "lookup"],
    ["ui"],
    ["job", "list"],
    ["job", "show"],
    ["archive"],
    ["archive", "list"],
]


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage: jobledger " + " ".join(argv) in capsys.readouterr().out


HEAVY = ("pyspark", "confluent_kafka", "pydantic", "numpy", "cavro", "fastavro", "cryptography")


@pytest.mark.parametrize("argv", [["--version"], ["--help"]], ids=" ".join)
def test_version_and_help_import_no_heavy_library(argv):
    """`jobledger --version` and `--help` answer at once: they import no Kafka client, no
    event models, no Spark (each took its share of the 1.8 s `--version` took)."""
    code = (
        "import sys\n"
        "from jobledger.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_commands_table_says_what_each_command_s_own_parser_says():
    """`--help` lists every command from `main.COMMANDS` without importing its module; each
    line there is the one the module gives its parser, and running a command builds its
    module's parser in full."""
    [action] = build_parser()._subparsers._group_actions
    assert {a.dest: a.help for a in action._choices_actions} == {
        name: line for name, (_, line) in COMMANDS.items()
    }
    for name, (module, _) in COMMANDS.items():
        full = build_parser(name)._subparsers._group_actions[0].choices[name]
        assert len(full._actions) > 1, f"{name}: only a stub, not {module}'s parser"


def test_schemas_list_says_what_each_event_means(capsys):
    assert main(["schemas", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(EVENTS_BY_NAME)
    assert all(len(line.split("\t")) == 4 and line.split("\t")[3] for line in lines), lines
    assert (
        "TaskManagerLost\tresourcemanager\tkey=resource_id\tA TaskExecutor is gone (heartbeat "
        "timeout, shutdown); its slots and tasks are lost."
    ) in lines
    assert (  # an "e.g." ends no sentence
        "SlotAllocationFailed\tresourcemanager\tkey=resource_id\tThe TaskExecutor refused an "
        "allocation, e.g. the slot is occupied by another job."
    ) in lines


def test_schemas_show_prints_the_avsc(capsys):
    assert main(["schemas", "show", "SlotOffered"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "SlotOffered"


def test_schemas_show_unknown_type_is_an_error(capsys):
    assert main(["schemas", "show", "NoSuchEvent"]) == 1
    assert "unknown event type 'NoSuchEvent'" in capsys.readouterr().err


def test_schemas_files_are_up_to_date():
    assert main(["schemas", "write", "--check"]) == 0


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("jobledger ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topics", "create", "--partitions", "0"], "--partitions: 0 is less than 1"),
        (["replay", "--at", "job/x@1"], "is not a position"),
        (["replay", "--count", "x"], "--count: 'x' is not a number"),
        (["replay", "--until-time", "yesterday"], "neither epoch milliseconds nor an ISO time"),
        (["services", "run", "--session-timeout-ms", "-1"], "-1 is less than 1"),
        (["services", "run", "--stop-deadline-s", "-2"], "-2 is less than 0.0"),
        (["demo", "wordcount", "f.txt", "--parallelism", "0"], "0 is less than 1"),
        (["runner", "--slots", "0"], "--slots: 0 is less than 1"),
        (["tail", "job", "-o", "sometime"], "expected beginning, end, an offset"),
        (["tail", "job", "-p", "-1"], "-1 is less than 0"),
        (["job", "wait", "j", "--timeout", "0"], "--timeout: 0 is less than"),
        (["job", "cancel", "j", "-o", "yaml"], "invalid choice: 'yaml'"),
        (["kvstate", "lookup", "j", "counts", "{", "--json-key"], "--json-key: '{' is not JSON"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1764010000000", 1764010000000),
        ("2026-11-24T18:47:44Z", 1795546064000),
        ("2026-11-24T18:47:44", 1795546064000),
        ("2026-11-24T19:47:44+01:00", 1795546064000),
    ],
)
def test_times_are_epoch_ms_or_iso(text, ms):
    assert epoch_ms(text) == ms


def test_a_missing_export_is_one_line(tmp_path, capsys):
    assert main(["replay", "--file", str(tmp_path / "nope.avro")]) == 1
    assert (
        capsys.readouterr().err
        == f"jobledger: {tmp_path / 'nope.avro'}: No such file or directory\n"
    )


def test_a_file_that_is_not_an_export_is_one_line(tmp_path, capsys):
    (tmp_path / "words.txt").write_text("not avro")
    assert main(["replay", "--file", str(tmp_path / "words.txt")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "words.txt is not a jobledger export" in line


def test_an_avro_file_of_another_schema_is_one_line(tmp_path, capsys):
    """Another tool's Avro container: today's events cannot be resolved from its records."""
    schema = parse_schema(
        {"type": "record", "name": "Other", "fields": [{"name": "a", "type": "int"}]}
    )
    with (tmp_path / "other.avro").open("wb") as out:
        writer(out, schema, [{"a": 1}])
    assert main(["replay", "--file", str(tmp_path / "other.avro")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "other.avro is not a jobledger export" in line and "records are Other" in line


def test_an_unreachable_broker_is_one_line_naming_what_to_do(capsys):
    port = free_port()
    assert main(["produce", "--bootstrap", f"127.0.0.1:{port}", "-"]) == 69
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"jobledger: no Kafka broker answers at 127.0.0.1:{port}")
    assert "jobledger broker --detach" in line


@pytest.fixture
def export(tmp_path):
    """An export of a small log: a job's events on two partitions, a timer, the RM's."""
    clock = Clock(start=1_700_000_000_000)
    rows = [
        (TopicRole.JOB, 0, 0, clock(JobMasterLeadershipGranted, job_id="a", job_master_id="m")),
        (TopicRole.JOB, 0, 1, clock(TimerFired, scope=OwnerKind.JOB, owner_id="a")),
        (TopicRole.JOB, 0, 2, clock(JobCancellationRequested, job_id="a")),
        (TopicRole.JOB, 1, 0, clock(JobMasterLeadershipGranted, job_id="b", job_master_id="m")),
        (TopicRole.RESOURCE_MANAGER, 0, 0, clock(TimerFired, scope=OwnerKind.RESOURCE_MANAGER,
                                                 owner_id="resourcemanager")),
    ]  # fmt: skip
    records = [LogRecord(role, p, o, e.event_time, e) for role, p, o, e in rows]
    path = tmp_path / "log.avro"
    with path.open("wb") as out:
        write_export(records, out)
    return path


def _tail(export, capsys, *args):
    assert main(["tail", "--file", str(export), *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_tail_of_an_export_shows_position_time_key_and_type_and_hides_timers(export, capsys):
    lines = _tail(export, capsys, "job")
    assert [line.split(" ")[:4] for line in lines] == [
        ["job/0@0", "2023-11-14T22:13:20.001Z", "a", "JobMasterLeadershipGranted"],
        ["job/0@2", "2023-11-14T22:13:20.003Z", "a", "JobCancellationRequested"],
        ["job/1@0", "2023-11-14T22:13:20.004Z", "b", "JobMasterLeadershipGranted"],
    ]


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        ([], ["job/0@0", "job/0@2", "job/1@0"]),
        (["--timers"], ["job/0@0", "job/0@1", "job/0@2", "job/1@0", "resourcemanager/0@0"]),
        (["job", "-p", "1"], ["job/1@0"]),
        (["job", "-o", "-1"], ["job/0@2", "job/1@0"]),
        (["job", "-o", "2"], ["job/0@2"]),
        (["job", "-o", "end"], []),
        (["--job", "b"], ["job/1@0"]),
        (["--type", "JobCancellationRequested"], ["job/0@2"]),
        (["-o", "s@1700000000003"], ["job/0@2", "job/1@0"]),
        (["-o", "e@2023-11-14T22:13:20.003Z"], ["job/0@0"]),
        (["-c", "2"], ["job/0@0", "job/0@2"]),
    ],
)
def test_tail_of_an_export_starts_stops_and_filters_like_kcat(export, capsys, args, shown):
    assert [line.split(" ")[0] for line in _tail(export, capsys, *args)] == shown


def test_tail_formats_json_with_its_place_and_bare_events_for_produce(export, capsys):
    [line] = _tail(export, capsys, "--job", "b", "--format", "json")
    assert json.loads(line) == {
        "topic": "job", "partition": 1, "offset": 0, "timestamp": 1_700_000_000_004, "key": "b",
        "writer": {"principal": None, "role": None, "key_id": None, "refused": None},
        "event": {"type": "JobMasterLeadershipGranted", "event_id": "in-4",
                  "event_time": 1_700_000_000_004, "producer": "test", "cause_event_id": None,
                  "job_id": "b", "job_master_id": "m"},
    }  # fmt: skip
    [line] = _tail(export, capsys, "--job", "b", "--format", "event")
    assert event_from_json(line).job_id == "b"


def test_tail_refuses_an_unknown_event_type(export, capsys):
    with pytest.raises(SystemExit):
        main(["tail", "--file", str(export), "--type", "SlotOfered"])
    assert "unknown event type(s) SlotOfered" in capsys.readouterr().err


def test_asking_for_timer_events_by_type_shows_them(export, capsys):
    lines = _tail(export, capsys, "--type", "TimerFired")
    assert [line.split(" ")[0] for line in lines] == ["job/0@1", "resourcemanager/0@0"]
