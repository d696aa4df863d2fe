"""The ``prme-pg`` command line.

Subcommands are named by what they do. ``--dsn`` defaults to ``$PRME_DSN``, then
``$DATABASE_URL``. Human output is a table; ``--json`` prints one document.
Exit codes: 0 ok, 1 failure, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from . import migrations
from .errors import MigrationError

__all__ = ["main"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad command-line usage: exit code 2."""


def _default_dsn() -> str | None:
    return os.environ.get("PRME_DSN") or os.environ.get("DATABASE_URL")


def _require_dsn(args: argparse.Namespace) -> str:
    if not args.dsn:
        raise UsageError("no database given: pass --dsn URL or set PRME_DSN (or DATABASE_URL)")
    return str(args.dsn)


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, application_name="prme-pg")


def _print_json(document: object) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def cmd_migrate(args: argparse.Namespace, console: Console) -> int:
    dsn = _require_dsn(args)
    with _connect(dsn) as conn:
        if args.sql:
            # Review mode: print what would run, change nothing.
            sys.stdout.write(migrations.pending_sql(conn) or "-- nothing to apply\n")
            return EXIT_OK

        def announce(migration: migrations.Migration) -> None:
            if not args.json:
                console.print(f"applying [bold]{migration.filename}[/bold] ...")

        applied = migrations.migrate(conn, on_apply=announce)
        states = migrations.status(conn)
    if args.json:
        _print_json(
            {
                "applied": [m.filename for m in applied],
                "current_version": max((s.version for s in states if s.applied), default=0),
            }
        )
    elif applied:
        console.print(f"applied {len(applied)} migration(s); the schema is current")
    else:
        console.print("nothing to apply; the schema is current")
    return EXIT_OK


def cmd_status(args: argparse.Namespace, console: Console) -> int:
    dsn = _require_dsn(args)
    with _connect(dsn) as conn:
        states = migrations.status(conn)
    pending = [s for s in states if not s.applied]
    if args.json:
        _print_json(
            {
                "migrations": [
                    {
                        "version": s.version,
                        "name": s.name,
                        "file": s.filename,
                        "applied_at": s.applied_at,
                    }
                    for s in states
                ],
                "pending": len(pending),
                "current": not pending,
            }
        )
    else:
        table = Table(title="prme-pg migrations")
        for column in ("version", "file", "state", "applied at"):
            table.add_column(column)
        for s in states:
            table.add_row(
                f"{s.version:04d}",
                s.filename,
                "applied" if s.applied else "[yellow]pending[/yellow]",
                str(s.applied_at or ""),
            )
        console.print(table)
        console.print("schema is current" if not pending else f"{len(pending)} migration(s) pending")
    # A pending migration is a state, not a failure; exit 0 either way.
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prme-pg",
        description="prme-pg: a PostgreSQL-native memory engine for AI agents.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(
        name: str, help_text: str, handler: Callable[[argparse.Namespace, Console], int]
    ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    def add_dsn(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--dsn",
            default=_default_dsn(),
            help="PostgreSQL URL (default: $PRME_DSN, then $DATABASE_URL)",
        )
        command.add_argument("--json", action="store_true", help="print one JSON document")

    migrate = add("migrate", "Apply pending migrations, each in its own transaction.", cmd_migrate)
    add_dsn(migrate)
    migrate.add_argument("--sql", action="store_true", help="print the pending SQL for review instead of applying it")
    add_dsn(add("status", "Show which migrations are applied and which are pending.", cmd_status))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    console = Console(stderr=False)
    err = Console(stderr=True)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args, console))
    except UsageError as exc:
        err.print(f"[red]usage:[/red] {exc}")
        return EXIT_USAGE
    except MigrationError as exc:
        err.print(f"[red]migration error:[/red] {exc}")
        return EXIT_FAILURE
    except psycopg.Error as exc:
        err.print(f"[red]database error:[/red] {exc}")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
