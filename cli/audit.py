"""`jobledger checkpoint` and `jobledger audit`: signed tree heads of the log, and an export
proven complete and unaltered offline (`projections/log/checkpoints.py`, `audit.py`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jobledger.projections.log.audit import AuditFailed, audit
from jobledger.projections.log.checkpoints import Checkpointer, exported_checkpoints
from jobledger.projections.log.log_file import ExportFile
from jobledger.services import signing
from jobledger.services.signing import Keyring

from .log_source import reducers_of
from .options import (
    CommandFailed,
    bootstrap_of,
    configuration_option,
    positive_float,
    positive_int,
    prefix_of,
)

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "checkpoint", parents=[common],
        help="write signed checkpoints (Merkle tree heads) of every partition of the log",
    )  # fmt: skip
    p.add_argument(
        "--every-records", type=positive_int, default=1_000, metavar="N",
        help="checkpoint a partition once it has grown by N records (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--interval-s", type=positive_float, default=10.0, metavar="S",
        help="read the log this often (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--once", action="store_true",
        help="one pass, checkpointing every partition that grew at all, then exit",
    )  # fmt: skip
    p.add_argument("--name", default="services",
                   help="the services principal whose key (--signing-key) signs (default: "
                   "%(default)s)")  # fmt: skip
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser(
        "audit", help="check an export offline: signatures, checkpoints, decisions",
    )  # fmt: skip
    p.add_argument("file", type=Path, help="an export (`jobledger export`)")
    p.add_argument("--keyring", type=Path, required=True, metavar="FILE",
                   help="the public keys to trust (`jobledger keys`)")  # fmt: skip
    p.add_argument(
        "--trusted", type=Path, action="append", default=[], metavar="NOTE",
        help="a checkpoint note kept from earlier (say, published): the export must agree "
        "with it, so a log rolled back before it is caught",
    )  # fmt: skip
    configuration_option(p)
    p.set_defaults(func=cmd_audit)


def cmd_checkpoint(args: argparse.Namespace) -> int:
    key = signing.signing_key()
    if key is None:
        raise CommandFailed("checkpoints are signed: give the services' key (--signing-key or "
                            f"${signing.SIGNING_KEY_ENV})")  # fmt: skip
    checkpointer = Checkpointer(bootstrap_of(args), prefix_of(args), key, args.name,
                                args.every_records)  # fmt: skip
    try:
        while True:
            for checkpoint in checkpointer.run_once(force=args.once):
                print(f"{checkpoint.origin}: {checkpoint.size} records", flush=True)
            if args.once:
                return 0
            time.sleep(args.interval_s)
    finally:
        checkpointer.close()


def cmd_audit(args: argparse.Namespace) -> int:
    keyring = Keyring.load(args.keyring)
    trusted = [path.read_text() for path in args.trusted]
    with ExportFile(args.file) as export:
        checkpoints = exported_checkpoints(export.metadata)
        records = [r for rows in export.blocks() for r in export.records(rows)]
    try:
        if isinstance(checkpoints, str):
            raise AuditFailed(checkpoints)
        report = audit(records, checkpoints, keyring, reducers_of(args), trusted)
    except AuditFailed as failed:
        print(f"audit failed: {failed}")
        return 1
    print(report.summary())
    return 0
