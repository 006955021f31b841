"""`jobledger broker --secure`: TLS, SASL/SCRAM-SHA-512, one principal per role, and the ACLs
that hold what Kafka can hold.

Listeners. Clients and the brokers among themselves speak SASL_SSL with SCRAM-SHA-512 on the
one client port. The KRaft CONTROLLER listener cannot use SCRAM (its credentials live in the
metadata log the controllers are still agreeing on; Kafka's docs and cp-ansible say so), so it
takes SASL PLAIN over loopback with a `controller` user of its own (a PLAINTEXT controller
listener would make `User:ANONYMOUS` a super user that any local process could be, through
`--bootstrap-controller`). `controller` and `admin` (who is also the brokers' inter-broker
user) are the super users; the StandardAuthorizer refuses everything no ACL allows.

Principals. `admin`, `services`, `runner`, `client`: SCRAM users written into the storage with
`kafka-storage format --add-scram` before the first start (KIP-900: the brokers need theirs
before any controller is up to take AlterUserScramCredentials), with random passwords kept in
`credentials.json` (mode 0600) under `$JOBLEDGER_HOME/secure/`. Each principal gets a
librdkafka property file there (`<principal>.properties`, mode 0600, key=value: what `kcat -F`
and jobledger's own `-F` read). The files hold no `bootstrap.servers`: jobledger takes the
address from `--bootstrap` and refuses it in a file, and the address can move between starts.

ACLs (granted by `admin` after start, for one topic prefix P, `jobledger.` by default). Topic
names are `P<role>` (schemas/topics.py) and result partitions `Presult.<job>...`
(services/runner/exchange.py); the services' transactional ids are `jobledger-P<role>-<n>`
(services/host/transactions.py) and their group `jobledger-services-P` (with `-rebuild`); a
runner's ids start `jobledger-runner-P` (services/runner/runner.py), a client's
`jobledger-<owner>-` with owner `cli` or `demo-` (services/kafka.transactional_producer).
Kafka cannot say who wrote a record on a topic several roles write; the records' signatures
do (services/signing.py).

`X*` is a prefixed pattern, anything else literal; R/W/D/C/A/X: Read, Write, Describe, Create,
Alter, Delete. Every rule is ALLOW; what no rule allows is refused.

  who       resource                              ops        why
  services  topic P*                              R D        consume every input; rebuild from
                                                             snapshots
  services  topics Pjob Presourcemanager          W          decisions go to the owners' inboxes
            Ptaskexecutor
  services  topics Pdeadletter Psnapshot          W          only the services dead-letter,
            Pcheckpoint                                      snapshot and checkpoint (no one else
                                                             may forge a dead letter, a state to
                                                             restart from or a tree head)
  services  group jobledger-services-P*           R D        only they join it: a member that never
                                                             processes stalls every partition
  services  transactional id jobledger-P*         W D        only they may fence a service
                                                             (init_transactions on its id)
  all three group jobledger-reader-*              R D        read_committed readers' own groups
  runner    topic P*                              R D        deployments and their inputs
  runner    topics Pjob Presourcemanager          W          registrations, heartbeats, task
            Ptaskexecutor Pkvstate                           states, queryable state
  runner    topic Presult.*                       C A W R D X result partitions: only runners
                                                             make, grow, write and delete them
                                                             (a runner deletes a job's once a
                                                             release the services signed says
                                                             it ended: `runner --keyring`)
  runner    transactional id jobledger-runner-P*  W D        the driver's and the Spark tasks'
                                                             producers
  runner    group jobledger-spark-*               R D        the Python Kafka source's readers
  client    topic P*                              R D        tail, job wait, replay, debugging
  client    topics Pjob Presourcemanager          W          submissions and other inputs
            Ptaskexecutor
  client    transactional ids jobledger-cli-*     W D        produce, job, the demo: never the id of
            jobledger-demo-*                                 a service or a runner
  client    group jobledger-services-P            D          job wait and log exports read what was
                                                             decided (OffsetFetch); never join
  admin, controller: super users                             topics, ACLs, the brokers' own traffic

Not held by Kafka: which of services, runners and clients wrote a record on an inbox (all
three write them), what a runner's `topic` sink may write (other topics need an ACL by hand).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
)
from confluent_kafka.admin import ResourcePatternType as Pattern
from confluent_kafka.admin import ResourceType as Resource

from jobledger.schemas.topics import INPUT_ROLES, TopicRole, topic_name

from ..home import home
from ..kafka import CLIENT_LOGGING, SERVICES_GROUP_PREFIX
from ..signing import ROLES, Keyring, SigningKey
from . import tls
from .loopback import BrokerError

PRINCIPALS = ROLES
"""One SCRAM user per role of the design's trust boundaries (docs/reference/design-rules.md),
named as the role its signing key has in the keyring; `admin` is a super user."""
CONTROLLER = "controller"
"""The KRaft controllers' PLAIN user, on the CONTROLLER listener only; a super user."""
MECHANISM = "SCRAM-SHA-512"
LISTENER = "SASL_SSL"


def secure_dir() -> Path:
    return home() / "secure"


def keyring_path() -> Path:
    """The keyring `services run --keyring` is given (`signing.Keyring`)."""
    return secure_dir() / "keyring.json"


def signing_key_path(principal: str) -> Path:
    return secure_dir() / f"{principal}.key"


RUNNER_TASK_EXECUTORS = 4
"""How many TaskExecutors the home's `runner` principal is stated to speak for: those of
`jobledger runner` with its default --runner-id (`runner`) and up to this --task-executors."""


def runner_task_executors(runner_id: str, count: int) -> tuple[str, ...]:
    """The ResourceIDs `jobledger runner --runner-id runner_id --task-executors count`
    registers (`services/runner/instances.py` names them so), for a keyring to state."""
    return tuple(f"{runner_id}-{n}" for n in range(count))


def ensure_signing_keys() -> Keyring:
    """A signing key per principal (`<principal>.key`, mode 0600) and the keyring with their
    public keys, made the first time; a key revoked by hand stays revoked, and a principal
    whose every key is revoked or gone gets a new one. The `runner` principal's key states
    the TaskExecutors it speaks for (a keyring written before keys stated them gets them)."""
    path = keyring_path()
    keyring = Keyring.load(path) if path.is_file() else Keyring({})
    for principal in PRINCIPALS:
        owned = ()
        if principal == "runner":
            owned = runner_task_executors("runner", RUNNER_TASK_EXECUTORS)
        key_file = signing_key_path(principal)
        key = SigningKey.load(key_file) if key_file.is_file() else None
        entry = keyring.entries.get(key.key_id) if key else None
        if entry is None or entry.revoked_at_ms is not None:
            key = SigningKey.generate()
            tls.write_private(key_file, key.pem())
            keyring.add(key, principal, principal, owned)
        elif key is not None and owned and not entry.task_executors:
            keyring.add(key, principal, principal, owned)
    keyring.save(path)
    return keyring


def credentials_path() -> Path:
    """Every user's password: the one copy of what the storage's SCRAM users were made from."""
    return secure_dir() / "credentials.json"


def properties_path(principal: str) -> Path:
    return secure_dir() / f"{principal}.properties"


@dataclass(frozen=True)
class Secrets:
    """The passwords of every user (`PRINCIPALS` and `CONTROLLER`) and where the TLS files
    are: made once per home, kept across restarts because the storage holds the SCRAM
    credentials made from them."""

    passwords: dict[str, str]
    ca: Path
    keystore: Path


def ensure_secrets() -> Secrets:
    """Read the home's secrets, or make them (random passwords, a CA and a broker
    certificate) the first time."""
    folder = secure_dir()
    path = credentials_path()
    if path.is_file():
        passwords = json.loads(path.read_text())
    else:
        # hex: nothing in it needs quoting in JAAS, the --add-scram syntax or a properties file
        passwords = {user: secrets.token_hex(24) for user in (*PRINCIPALS, CONTROLLER)}
        tls.write_private(path, json.dumps(passwords, indent=1).encode())
    made = Secrets(passwords, folder / "ca.pem", folder / "broker-keystore.pem")
    tls.make_certificates(made.ca, made.keystore)
    return made


def server_settings(made: Secrets) -> dict[str, str]:
    """What a secure node adds to (or changes in) `apache_kafka.server_properties`."""
    admin, controller = made.passwords["admin"], made.passwords[CONTROLLER]
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    listener = LISTENER.lower()
    return {
        "listener.security.protocol.map": f"{LISTENER}:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": LISTENER,
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{listener}.{MECHANISM.lower()}.sasl.jaas.config":
            f'{scram} required username="admin" password="{admin}";',
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config":
            f'{plain} required username="{CONTROLLER}" password="{controller}" '
            f'user_{CONTROLLER}="{controller}";',
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(made.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(made.ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:admin;User:{CONTROLLER}",
        # the broker dates each record: a revoked signing key cannot date its records before
        # the revocation (`signing`'s keyring compares the two)
        "log.message.timestamp.type": "LogAppendTime",
    }  # fmt: skip


def format_arguments(made: Secrets) -> list[str]:
    """`kafka-storage format` arguments that seed every principal's SCRAM credential."""
    return [
        arg
        for user in PRINCIPALS
        for arg in ("--add-scram", f"{MECHANISM}=[name={user},password={made.passwords[user]}]")
    ]


def client_config(made: Secrets, principal: str) -> dict[str, str]:
    """librdkafka settings of `principal` (what its property file holds)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": MECHANISM,
        "sasl.username": principal,
        "sasl.password": made.passwords[principal],
        "ssl.ca.location": str(made.ca),
    }


def write_properties(made: Secrets) -> None:
    """One librdkafka property file per principal, mode 0600 (written at every start, so a
    file deleted or changed by hand comes back as the broker needs it)."""
    for principal in PRINCIPALS:
        settings = client_config(made, principal)
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        tls.write_private(properties_path(principal), text.encode())


def provision(made: Secrets, bootstrap: str, prefix: str) -> None:
    """What a running secure broker's home needs for topic prefix `prefix`: every principal's
    property file and signing key, the keyring, and the ACLs."""
    write_properties(made)
    ensure_signing_keys()
    grant(made, bootstrap, prefix)


def acl_bindings(prefix: str) -> list[AclBinding]:
    """The ACLs of the module docstring's table, for topic prefix `prefix`."""
    op = AclOperation
    inputs = [topic_name(role, prefix) for role in INPUT_ROLES]
    services_group = f"{SERVICES_GROUP_PREFIX}{prefix}"
    rules: list[tuple[str, Resource, str, Pattern, tuple[AclOperation, ...]]] = [
        ("services", Resource.TOPIC, prefix, Pattern.PREFIXED, (op.READ, op.DESCRIBE)),
        *(("services", Resource.TOPIC, t, Pattern.LITERAL, (op.WRITE,)) for t in inputs),
        *(
            ("services", Resource.TOPIC, topic_name(role, prefix), Pattern.LITERAL, (op.WRITE,))
            for role in (TopicRole.DEAD_LETTER, TopicRole.SNAPSHOT, TopicRole.CHECKPOINT)
        ),
        ("services", Resource.GROUP, services_group, Pattern.PREFIXED, (op.READ, op.DESCRIBE)),
        ("services", Resource.TRANSACTIONAL_ID, f"jobledger-{prefix}", Pattern.PREFIXED,
         (op.WRITE, op.DESCRIBE)),
        *(
            (who, Resource.GROUP, "jobledger-reader-", Pattern.PREFIXED, (op.READ, op.DESCRIBE))
            for who in ("services", "runner", "client")
        ),
        ("runner", Resource.TOPIC, prefix, Pattern.PREFIXED, (op.READ, op.DESCRIBE)),
        *(
            ("runner", Resource.TOPIC, t, Pattern.LITERAL, (op.WRITE,))
            for t in (*inputs, topic_name(TopicRole.KV_STATE, prefix))
        ),
        ("runner", Resource.TOPIC, f"{prefix}result.", Pattern.PREFIXED,
         (op.CREATE, op.ALTER, op.WRITE, op.READ, op.DESCRIBE, op.DELETE)),
        ("runner", Resource.TRANSACTIONAL_ID, f"jobledger-runner-{prefix}", Pattern.PREFIXED,
         (op.WRITE, op.DESCRIBE)),
        ("runner", Resource.GROUP, "jobledger-spark-", Pattern.PREFIXED, (op.READ, op.DESCRIBE)),
        ("client", Resource.TOPIC, prefix, Pattern.PREFIXED, (op.READ, op.DESCRIBE)),
        *(("client", Resource.TOPIC, t, Pattern.LITERAL, (op.WRITE,)) for t in inputs),
        *(
            ("client", Resource.TRANSACTIONAL_ID, tid, Pattern.PREFIXED, (op.WRITE, op.DESCRIBE))
            for tid in ("jobledger-cli-", "jobledger-demo-")
        ),
        ("client", Resource.GROUP, services_group, Pattern.LITERAL, (op.DESCRIBE,)),
    ]  # fmt: skip
    return [
        AclBinding(resource, name, pattern, f"User:{who}", "*", operation, AclPermissionType.ALLOW)
        for who, resource, name, pattern, operations in rules
        for operation in operations
    ]


def grant(made: Secrets, bootstrap: str, prefix: str, timeout_s: float = 30.0) -> int:
    """Create the ACLs for topic prefix `prefix` as `admin` (creating one that exists changes
    nothing); return how many there are. librdkafka's own lines go to the services' logger
    (its note of a background event purged at close once reached the terminal)."""
    bindings = acl_bindings(prefix)
    admin = AdminClient(
        {**client_config(made, "admin"), "bootstrap.servers": bootstrap, **CLIENT_LOGGING}
    )
    try:
        for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
            future.result()
    except KafkaException as exc:
        raise BrokerError(f"could not create the ACLs on {bootstrap}: {exc.args[0]}") from exc
    return len(bindings)
