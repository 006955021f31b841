"""`jobledger keys`: the signing keys of a secured cluster and the keyring the services check
records against (`services/signing.py`).

`keys new PRINCIPAL --role ROLE` makes a key pair: the private key goes to a file of its own
(mode 0600) for that principal's `--signing-key`, the public key into the keyring. A runner's
key also states the TaskExecutors its principal speaks for: those `jobledger runner
--runner-id R --task-executors N` registers (`R-0` .. `R-<N-1>`, R being the principal's name
unless given), written into the keyring one by one; nothing else gives a runner a
TaskExecutor. `keys
revoke` revokes a key (or every key of a principal) from now on: records appended after it are
dead-lettered; the keyring keeps the key, so the log written before still checks out. `keys
list` shows the keyring. The services read the keyring when they start: restart them (one
instance after another) after a change.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from jobledger.services import signing
from jobledger.services.local import secure, tls

from .options import CommandFailed, positive_int

Subparsers = argparse._SubParsersAction


def _keyring_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keyring", type=Path, metavar="FILE",
        default=os.environ.get(signing.KEYRING_ENV),
        help=f"the keyring (default: ${signing.KEYRING_ENV}, else "
        "$JOBLEDGER_HOME/secure/keyring.json)",
    )  # fmt: skip


def add_parsers(sub: Subparsers) -> None:
    p = sub.add_parser("keys", help="signing keys and the services' keyring")
    keys = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    new = keys.add_parser("new", help="a key pair for a principal, added to the keyring")
    new.add_argument("principal", help="whose key")
    new.add_argument("--role", required=True, choices=signing.ROLES)
    new.add_argument(
        "--runner-id", metavar="R",
        help="a runner's: the --runner-id its `jobledger runner` is given (default: PRINCIPAL)",
    )  # fmt: skip
    new.add_argument(
        "--task-executors", type=positive_int, metavar="N",
        help="a runner's: the --task-executors its `jobledger runner` is given (default: 1); "
        "the key states TaskExecutors R-0 .. R-<N-1> as its principal's",
    )  # fmt: skip
    new.add_argument(
        "--out", type=Path,
        help="where the private key goes (default: $JOBLEDGER_HOME/secure/PRINCIPAL.key)",
    )  # fmt: skip
    _keyring_option(new)
    new.set_defaults(func=cmd_new)
    revoke = keys.add_parser("revoke", help="revoke a key, or every key of a principal")
    revoke.add_argument("key", help="a key id or a principal")
    _keyring_option(revoke)
    revoke.set_defaults(func=cmd_revoke)
    listed = keys.add_parser("list", help="the keyring's keys")
    _keyring_option(listed)
    listed.set_defaults(func=cmd_list)


def _path(args: argparse.Namespace) -> Path:
    return args.keyring or secure.keyring_path()


def _load(path: Path, must_exist: bool) -> signing.Keyring:
    if not path.is_file():
        if must_exist:
            raise CommandFailed(f"no keyring at {path} (make one with `jobledger keys new`)")
        return signing.Keyring({})
    return signing.Keyring.load(path)


def cmd_new(args: argparse.Namespace) -> int:
    path = _path(args)
    keyring = _load(path, must_exist=False)
    out = args.out or secure.signing_key_path(args.principal)
    if out.exists():
        raise CommandFailed(f"{out} exists: revoke its key and delete it, or pass --out")
    task_executors = _stated_task_executors(args)
    key = signing.SigningKey.generate()
    try:
        keyring.add(key, args.principal, args.role, task_executors)
    except signing.KeyFileError as exc:
        raise CommandFailed(str(exc)) from None
    tls.write_private(out, key.pem())
    keyring.save(path)
    print(f"key {key.key_id} of {args.principal} ({args.role}): private key {out} (mode 0600), "
          f"public key added to {path}")  # fmt: skip
    if task_executors:
        print(f"{args.principal} speaks for TaskExecutors {', '.join(task_executors)}")
    return 0


def _stated_task_executors(args: argparse.Namespace) -> tuple[str, ...]:
    """The TaskExecutors a new runner key states (none for another role)."""
    if args.role != "runner":
        if args.runner_id is not None or args.task_executors is not None:
            raise CommandFailed("--runner-id and --task-executors are a runner key's")
        return ()
    return secure.runner_task_executors(args.runner_id or args.principal, args.task_executors or 1)


def cmd_revoke(args: argparse.Namespace) -> int:
    path = _path(args)
    keyring = _load(path, must_exist=True)
    revoked = keyring.revoke(args.key, int(time.time() * 1000))
    if not revoked:
        raise CommandFailed(f"no key {args.key!r} that is not revoked already in {path}")
    keyring.save(path)
    for entry in revoked:
        print(f"revoked key {entry.key_id} of {entry.principal} at {entry.revoked_at_ms}")
    print("restart the services to have them read the keyring again")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for entry in _load(_path(args), must_exist=True).entries.values():
        revoked = "" if entry.revoked_at_ms is None else f"  revoked at {entry.revoked_at_ms}"
        owns = f"  TaskExecutors {','.join(entry.task_executors)}" if entry.task_executors else ""
        print(f"{entry.key_id}  {entry.principal:<12} {entry.role:<8}{owns}{revoked}")
    return 0
