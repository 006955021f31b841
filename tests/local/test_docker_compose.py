"""The compose file for a real cluster is well formed (it cannot run here: no Docker engine).

Each test reads docker/compose.yaml, docker/Dockerfile and pyproject.toml as text and checks
that the pieces which must agree do: listeners and bootstrap addresses, Spark versions, Python
versions, paths inside the image, service names, volumes. The cluster runs what the tests run:
the Kafka image is the version of the broker the tests start (`KAFKA_VERSION` of
jobledger.services.local.apache_kafka), with the same single-node settings, and the Spark image
is the installed pyspark's version. `docker compose config` (or Debian's `docker-compose config`)
validates the file when either is installed; neither needs a daemon for that.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
RUNNER_SCRIPT = ROOT / "cli" / "spark_submit.py"

CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
PROJECT_SERVICES = ("topics", "services", "spark-master", "spark-worker", "runner")
APACHE_KAFKA = "jobledger.services.local.apache_kafka"

# Kafka 4 on one node that is broker and controller: every internal topic with one replica (the
# defaults are 3 replicas, min ISR 2), groups without the 3 s initial rebalance delay, topics only
# from `jobledger topics create`. The broker the tests start sets the same (checked below).
SINGLE_NODE_PROPERTIES = {
    "process.roles": "broker,controller",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}
# Properties that depend on where the broker runs (addresses, ports, paths), not on what it is.
PLACEMENT_PROPERTIES = {
    "node.id",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "controller.listener.names",
    "controller.quorum.voters",
    "inter.broker.listener.name",
    "log.dirs",
}


def words(text: str) -> set[str]:
    return set(text.split())


# The compose specification's keys (schema/compose-spec.json of compose-spec/compose-spec), so
# that a misspelt key fails here rather than being ignored until `docker compose` reads it.
TOP_LEVEL_KEYS = words("configs include models name networks secrets services volumes")
SERVICE_KEYS = words(
    """
    annotations attach blkio_config build cap_add cap_drop cgroup cgroup_parent command
    configs container_name cpu_count cpu_percent cpu_period cpu_quota cpu_rt_period
    cpu_rt_runtime cpu_shares cpus cpuset credential_spec depends_on deploy develop
    device_cgroup_rules devices dns dns_opt dns_search domainname entrypoint env_file
    environment expose extends external_links extra_hosts gpus group_add healthcheck
    hostname image init ipc isolation label_file labels links logging mac_address mem_limit
    mem_reservation mem_swappiness memswap_limit models network_mode networks
    oom_kill_disable oom_score_adj pid pids_limit platform ports post_start pre_stop
    privileged profiles provider pull_policy pull_refresh_after read_only restart runtime
    scale secrets security_opt shm_size stdin_open stop_grace_period stop_signal storage_opt
    sysctls tmpfs tty ulimits use_api_socket user userns_mode uts volumes volumes_from
    working_dir
    """
)
HEALTHCHECK_KEYS = words("disable interval retries start_interval start_period test timeout")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def service(name: str) -> dict:
    return compose()["services"][name]


def command(name: str) -> list[str]:
    cmd = service(name)["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(arg) for arg in cmd]


def option(args: list[str], flag: str) -> list[str]:
    """Every value given to `flag` (as `--flag value` or `--flag=value`)."""
    values = []
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(flag + "="):
            values.append(arg.split("=", 1)[1])
    return values


def depends_on(svc: dict) -> dict[str, str]:
    deps = svc.get("depends_on", {})
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` as {NAME: (host, port)} (an empty host stays empty)."""
    out = {}
    for item in value.split(","):
        name, address = item.strip().split("://", 1)
        host, port = address.rsplit(":", 1)
        out[name] = (host, int(port))
    return out


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments), continuations joined."""
    instructions, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, rest = (pending + stripped).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), text)


def dockerfile_env() -> dict[str, str]:
    """ARG defaults and ENV values, with `${VAR}` references substituted.

    An ARG declared before FROM and again, without a value, after it keeps its default there
    (Docker's rule); that is how the Dockerfile names the Spark version once for both.
    """
    values: dict[str, str] = {}
    for keyword, rest in dockerfile():
        if keyword not in ("ARG", "ENV"):
            continue
        for pair in shlex.split(rest):
            key, has_value, value = pair.partition("=")
            if has_value or keyword == "ENV":
                values[key] = substitute(value, values)
            else:
                values.setdefault(key, "")
    return values


def dockerfile_runs() -> str:
    """Every RUN instruction, joined, with the ARG and ENV values substituted."""
    env = dockerfile_env()
    runs = " ; ".join(rest for keyword, rest in dockerfile() if keyword == "RUN")
    return substitute(runs, env)


def base_image() -> str:
    """The FROM image, with the ARGs declared before FROM (the only ones it sees) substituted."""
    args: dict[str, str] = {}
    for keyword, rest in dockerfile():
        if keyword == "FROM":
            return substitute(rest.split()[0], args)
        if keyword == "ARG":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                args[key] = substitute(value, args)
    raise AssertionError("docker/Dockerfile has no FROM")


def base_spark_version() -> str:
    image = base_image()
    assert image.startswith("apache/spark:"), image
    match = re.match(r"(\d+\.\d+\.\d+)-scala(\d+\.\d+)-java(\d+)-python3", image.split(":", 1)[1])
    assert match, f"{image}: expected a <spark>-scala<x.y>-java<n>-python3 tag"
    return match.group(1)


def in_repo(container_path: str) -> Path:
    """The repository file that the Dockerfile's COPY lines put at `container_path`."""
    target = PurePosixPath(container_path)
    for keyword, rest in dockerfile():
        if keyword != "COPY":
            continue
        args = [a for a in shlex.split(rest) if not a.startswith("--")]
        *sources, dest = args
        dest_path = PurePosixPath(dest)
        for source in sources:
            copied = dest_path / PurePosixPath(source).name if dest.endswith("/") else dest_path
            if target == copied or copied in target.parents:
                return ROOT / source / target.relative_to(copied)
    raise AssertionError(f"no COPY in docker/Dockerfile puts anything at {container_path}")


def internal_bootstrap() -> str:
    """The listener that the kafka service advertises to other containers, by its name."""
    env = service("kafka")["environment"]
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    internal = [(n, h, p) for n, (h, p) in advertised.items() if h == "kafka"]
    assert len(internal) == 1, f"one listener should be advertised as kafka:PORT: {advertised}"
    name, host, port = internal[0]
    assert listeners(env["KAFKA_LISTENERS"])[name][1] == port, "advertised port is not bound"
    assert name in protocols(env), f"{name} has no security protocol"
    return f"{host}:{port}"


def protocols(env: dict) -> dict[str, str]:
    pairs = env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    return dict(pair.strip().split(":", 1) for pair in pairs)


def kafka_property(variable: str) -> str:
    """The server property that the apache/kafka image makes of a KAFKA_* variable.

    The image's rule (docker/resources/utility of apache/kafka): drop `KAFKA_`, then a single
    `_` is a `.`, `__` is a `_`, `___` is a `-`, all in lower case.
    """
    name = variable.removeprefix("KAFKA_")
    name = re.sub(r"(?<!_)_(?!_)", ".", name)
    return name.replace("___", "-").replace("__", "_").lower()


def kafka_properties() -> dict[str, str]:
    """The kafka service's server properties, from its KAFKA_* environment."""
    env = service("kafka")["environment"]
    return {kafka_property(k): str(v) for k, v in env.items() if k.startswith("KAFKA_")}


def image_tag(image: str) -> str:
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag and "@" not in image, f"{image}: expected NAME:TAG"
    return tag


def project_broker():
    """jobledger.services.local.apache_kafka, or a skip while it does not exist.

    Only a missing module skips: once it exists, an import error or a version that differs from
    the compose file fails.
    """
    if importlib.util.find_spec(APACHE_KAFKA) is None:
        pytest.skip(f"{APACHE_KAFKA} does not exist yet: nothing to compare the kafka image with")
    return importlib.import_module(APACHE_KAFKA)


def test_kafka_image_is_the_version_of_the_broker_the_tests_start():
    image = service("kafka")["image"]
    assert image.startswith("apache/kafka:"), image
    assert image_tag(image) == project_broker().KAFKA_VERSION, (
        f"{image} vs {APACHE_KAFKA}.KAFKA_VERSION: change both together"
    )


def test_kafka_variables_are_read_by_the_images_rule():
    assert kafka_property("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR") == (
        "share.coordinator.state.topic.min.isr"
    )
    assert kafka_property("KAFKA_LISTENER_NAME_INTERNAL_SSL__KEY___PASSWORD") == (
        "listener.name.internal.ssl_key-password"
    )
    assert kafka_properties()["listeners"] == service("kafka")["environment"]["KAFKA_LISTENERS"]


def test_kafka_has_the_single_node_settings_of_kafka_4():
    properties = kafka_properties()
    missing = {k: v for k, v in SINGLE_NODE_PROPERTIES.items() if properties.get(k) != v}
    assert not missing, f"the kafka service should set {missing}"


def test_kafka_is_configured_like_the_broker_the_tests_start():
    broker = project_broker()
    text = broker.server_properties(9092, 9093, Path("/var/lib/kafka/data"))
    tested = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert SINGLE_NODE_PROPERTIES.items() <= tested.items(), "SINGLE_NODE_PROPERTIES is stale"
    compose_properties = kafka_properties()
    shared = (tested.keys() & compose_properties.keys()) - PLACEMENT_PROPERTIES
    differ = {
        k: (compose_properties[k], tested[k]) for k in shared if compose_properties[k] != tested[k]
    }
    assert not differ, f"compose vs the tests' broker (property: (compose, tests)): {differ}"


def test_compose_runs_kraft_kafka_without_auto_create():
    kafka = yaml.safe_load(COMPOSE.read_text())["services"]["kafka"]
    env = kafka["environment"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and "broker" in env["KAFKA_PROCESS_ROLES"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "9092:9092" in kafka["ports"]


def test_kafka_serves_the_host_and_the_containers_on_separate_listeners():
    env = service("kafka")["environment"]
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    bound = listeners(env["KAFKA_LISTENERS"])
    assert ("localhost", 9092) in advertised.values(), "the host keeps localhost:9092"
    assert internal_bootstrap() == "kafka:19092"
    for name in advertised:
        assert name in bound and name in protocols(env), name
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] not in advertised


def test_kafka_has_a_healthcheck_that_asks_the_broker():
    check = service("kafka")["healthcheck"]["test"]
    text = " ".join(check) if isinstance(check, list) else check
    assert "kafka-topics.sh" in text and "--bootstrap-server" in text


def test_only_compose_specification_keys_are_used():
    doc = compose()
    assert {k for k in doc if not k.startswith("x-")} <= TOP_LEVEL_KEYS
    for name, svc in doc["services"].items():
        assert set(svc) <= SERVICE_KEYS, f"{name}: unknown keys {set(svc) - SERVICE_KEYS}"
        assert set(svc.get("healthcheck", {})) <= HEALTHCHECK_KEYS, name
        assert "image" in svc, name


def test_every_dependency_names_a_service_with_a_valid_condition():
    services = compose()["services"]
    for name, svc in services.items():
        for dep, condition in depends_on(svc).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert dep != name
            assert condition in CONDITIONS, f"{name} -> {dep}: {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy"


def test_services_start_in_order():
    assert depends_on(service("topics")) == {"kafka": "service_healthy"}
    assert depends_on(service("services"))["topics"] == "service_completed_successfully"
    assert depends_on(service("runner"))["topics"] == "service_completed_successfully"
    assert depends_on(service("runner"))["spark-master"] == "service_healthy"
    assert depends_on(service("spark-worker"))["spark-master"] == "service_healthy"


def test_project_services_share_one_image_built_from_the_dockerfile():
    images = set()
    for name in PROJECT_SERVICES:
        svc = service(name)
        build = svc["build"]
        assert (COMPOSE.parent / build["context"]).resolve() == ROOT, name
        assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE, name
        images.add(svc["image"])
    assert len(images) == 1, f"one image name, so it builds once: {images}"


def test_topics_and_services_run_jobledger_against_the_internal_listener():
    bootstrap = internal_bootstrap()
    assert command("topics")[:3] == ["jobledger", "topics", "create"]
    assert command("services")[:3] == ["jobledger", "services", "run"]
    for name in ("topics", "services", "runner"):
        env = service(name)["environment"]
        assert env["JOBLEDGER_BOOTSTRAP"] == bootstrap, name
        assert set(option(command(name), "--bootstrap")) <= {bootstrap}, name


def test_the_services_stop_gracefully_and_restart():
    svc = service("services")
    assert svc["restart"] == "unless-stopped"
    assert svc["stop_signal"] == "SIGTERM"
    assert re.fullmatch(r"\d+(ms|s|m)", str(svc["stop_grace_period"]))
    assert service("topics").get("restart", "no") == "no", "a one-shot service"


def test_runner_submits_with_the_kafka_connector_of_the_images_spark():
    args = command("runner")
    assert PurePosixPath(args[0]).name == "spark-submit"
    (package,) = option(args, "--packages")
    match = re.fullmatch(r"org\.apache\.spark:spark-sql-kafka-0-10_(\d+\.\d+):(\S+)", package)
    assert match, package
    scala, version = match.groups()
    assert version == base_spark_version(), f"connector {version} vs image {base_image()}"
    assert f"-scala{scala}-" in base_image()
    pins = re.findall(r"pyspark==([^\"\s;]+)", dockerfile_runs())
    assert pins and set(pins) == {version}, f"pip's pyspark {pins} is not the image's {version}"


def test_the_images_spark_is_the_pyspark_the_tests_run():
    try:
        installed = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("pyspark is not installed (the `spark` extra): nothing to compare with")
    assert base_spark_version() == installed, f"{base_image()} vs pyspark {installed}"


def test_the_dockerfile_names_the_spark_version_once():
    version = base_spark_version()
    assert dockerfile_env()["SPARK_VERSION"] == version
    args = [rest for keyword, rest in dockerfile() if keyword in ("ARG", "ENV", "FROM", "RUN")]
    assert sum(rest.count(version) for rest in args) == 1, (
        f"{version} should appear only in ARG SPARK_VERSION; use ${{SPARK_VERSION}} elsewhere"
    )


def test_the_images_spark_is_in_the_pyspark_range_of_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (pyspark,) = [Requirement(r) for r in extras["spark"] if Requirement(r).name == "pyspark"]
    version = Version(base_spark_version())
    assert version in pyspark.specifier, f"{version} is outside pyproject's {pyspark}"
    assert version.major == 4


def test_runner_reads_the_internal_listener_and_checkpoints_on_a_shared_volume():
    args = command("runner")
    assert option(args, "--bootstrap") == [internal_bootstrap()]
    (checkpoint,) = option(args, "--checkpoint")
    mounts = {}
    for name in ("runner", "spark-worker"):
        for volume in service(name).get("volumes", []):
            source, target = volume.split(":")[:2]
            mounts.setdefault(name, {})[target] = source
    runner_mount = [
        t for t in mounts["runner"] if PurePosixPath(t) in PurePosixPath(checkpoint).parents
    ]
    assert runner_mount, f"{checkpoint} is not on a volume of the runner"
    volume = mounts["runner"][runner_mount[0]]
    assert mounts["spark-worker"].get(runner_mount[0]) == volume, (
        "executors write streaming state to the checkpoint: workers need the same volume there"
    )
    assert "--allow-module" not in args, "no user modules are allowed by default"


def test_runner_script_is_in_the_image_where_the_command_expects_it():
    args = command("runner")
    scripts = [a for a in args if a.endswith(".py")]
    assert scripts == ["/opt/jobledger/cli/spark_submit.py"]
    repo_path = in_repo(scripts[0])
    assert repo_path == RUNNER_SCRIPT
    if not RUNNER_SCRIPT.exists():
        pytest.skip("cli/spark_submit.py does not exist yet (the runner is being written)")
    assert repo_path.is_file()


def test_workers_and_runner_point_at_the_master():
    master = command("spark-master")
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    host, port = option(master, "--host")[0], option(master, "--port")[0]
    assert host == "spark-master" and host in compose()["services"]
    url = f"spark://{host}:{port}"
    worker = command("spark-worker")
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert worker[-1] == url
    runner = command("runner")
    script = next(i for i, arg in enumerate(runner) if arg.endswith(".py"))
    assert option(runner[:script], "--master") == [url], "spark-submit's master"
    assert option(runner[script:], "--master") == [url], "the script's master (set in code, wins)"
    assert f"{port}:{port}" in service("spark-master")["ports"]
    assert "8080:8080" in service("spark-master")["ports"]
    assert service("spark-worker")["deploy"]["replicas"] >= 2


def test_dockerfile_python_is_at_least_311_and_drives_pyspark():
    env = dockerfile_env()
    runs = dockerfile_runs()
    match = re.search(r'"?python(3\.\d+)"? -m venv "?([^"\s;]+)', runs)
    assert match, "the Dockerfile creates a virtualenv with an explicit python3.X"
    python, venv = Version(match.group(1)), match.group(2)
    assert python >= Version("3.11"), f"jobledger needs Python >= 3.11, the image has {python}"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == f"{venv}/bin/python"
    assert f'"{venv}/bin/python" -m pip install' in runs and "/opt/jobledger[spark]" in runs
    workdirs = [rest for keyword, rest in dockerfile() if keyword == "WORKDIR"]
    assert workdirs[-1] == "/opt/jobledger"


def test_named_volumes_are_declared():
    doc = compose()
    declared = set(doc.get("volumes") or {})
    used = set()
    for svc in doc["services"].values():
        for volume in svc.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if not source.startswith(("/", ".", "~", "$")):
                used.add(source)
    assert used <= declared, f"undeclared volumes: {used - declared}"
    assert {"checkpoints"} <= used


def compose_cli() -> list[str] | None:
    """`docker compose` (the plugin) if it works, else `docker-compose` (Debian's package)."""
    if shutil.which("docker"):
        version = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=60
        )
        if version.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_config_accepts_the_file():
    cli = compose_cli()
    if cli is None:
        pytest.skip(
            "neither `docker compose` (the compose plugin) nor `docker-compose` is installed "
            "(Debian: apt-get install docker-compose); `config` needs no daemon"
        )
    result = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "Cannot connect to the Docker daemon" in result.stderr:
        pytest.skip(f"`{' '.join(cli)} config` wants a daemon here")
    assert result.returncode == 0, f"{' '.join(cli)} config: {result.stderr}"
