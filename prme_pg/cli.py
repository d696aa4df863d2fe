"""The ``prme-pg`` command line.

Subcommands are named by what they do. ``--dsn`` defaults to ``$PRME_DSN``, then
``$DATABASE_URL``. Human output is a table on a terminal wide enough for it, plain
tab-separated lines otherwise (piped, or too narrow: ids are never cut); ``--json``
prints one document. Every error is one line on stderr, in the CLI's own terms (flag
names, not parameter names), never a traceback. Exit codes: 0 ok, 1 failure, 2 usage
(a bad flag or argument value, including a value the engine refuses).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import psycopg
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import migrations
from .embeddings import INDEX_MIN_VECTORS, Embedder
from .errors import InvalidInput, MigrationError, PrmeError
from .learning import LearningQueue, LearningSync, queue_status, read_hook_document, rejected_records
from .models import AppliedOp, MaintenancePatch
from .outbox import LEDGER_KINDS
from .sqlstate import error_message
from .validation import loads_bounded

if TYPE_CHECKING:
    from .client import MemoryClient
    from .journal import JournalHead
    from .models import JournalIssue, JournalRecord

__all__ = ["main"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad command-line usage: exit code 2."""


# -- one line per error ----------------------------------------------------------------


def _one_line(text: str) -> str:
    """A message on one line: its lines joined with "; " (psycopg's errors span several)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _error_line(label: str, message: str) -> None:
    """The one place an error is printed: ``label: message`` on stderr, the message never read as markup."""
    Console(stderr=True, soft_wrap=True).print(f"[red]{label}:[/red] {escape(_one_line(message))}", highlight=False)


def _in_flag_terms(message: str, flags: dict[str, str]) -> str:
    """The engine names its parameters (max_count); say the flag the user typed (--limit) instead."""
    for parameter, flag in flags.items():
        message = re.sub(rf"\b{re.escape(parameter)}\b", flag, message)
    return message


#: SQLSTATEs that mean this database lacks (part of) this release's schema.
_MISSING_SCHEMA = ("3F000", "42883", "42P01")  # invalid_schema_name, undefined_function, undefined_table


def _database_message(exc: psycopg.Error) -> str:
    message = error_message(exc)
    if exc.sqlstate in _MISSING_SCHEMA and "prme" in message:
        message += " (this database lacks this release's prme schema: run prme-pg migrate; prme-pg status shows it)"
    return message


def _fail(exc: BaseException, args: argparse.Namespace | None = None) -> int:
    """The one place an exception becomes an exit code and one line on stderr; re-raises anything unexpected."""
    flags: dict[str, str] = getattr(args, "flags", None) or {}
    if isinstance(exc, UsageError):
        _error_line("usage", str(exc))
        return EXIT_USAGE
    if isinstance(exc, InvalidInput):  # a value the user gave, refused: say it in the user's flags
        _error_line("error", _in_flag_terms(str(exc), flags))
        return EXIT_USAGE
    if isinstance(exc, MigrationError):
        _error_line("migration error", str(exc))
        return EXIT_FAILURE
    if isinstance(exc, PrmeError):
        _error_line("error", str(exc))
        return EXIT_FAILURE
    if isinstance(exc, psycopg.Error):
        _error_line("database error", _database_message(exc))
        return EXIT_FAILURE
    if isinstance(exc, OSError):  # an unavailable file, folder or port
        detail = f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else str(exc)
        _error_line("error", detail)
        return EXIT_FAILURE
    if isinstance(exc, KeyboardInterrupt):
        _error_line("interrupted", "stopped by Ctrl-C")
        return 130
    raise exc


# -- parsing: one flag per concept, defaults in --help, usage errors in one line -------


class _HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default after its help, unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if text == argparse.SUPPRESS or "default" in text or not action.option_strings:
            return text
        if action.default in (None, False, "", [], argparse.SUPPRESS):
            return text  # said in words by the option's help (tests/test_cli.py checks every option)
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """The parser of prme-pg and of every subcommand (add_subparsers makes its own kind)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # A group of one visible flag and its hidden alias: "one of the arguments --user is required".
        message = re.sub(
            r"one of the arguments (\S+) is required", r"the following arguments are required: \1", message
        )
        _error_line("usage", f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)


def _between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from low to high, or a usage error naming the flag."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


class _DeprecatedAlias(argparse.Action):
    """A flag kept for old scripts: stores like its successor and says so on stderr."""

    def __init__(self, *args: Any, successor: str, **kwargs: Any) -> None:
        self.successor = successor
        super().__init__(*args, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, *_: Any) -> None:
        _error_line("warning", f"{'/'.join(self.option_strings)} is deprecated; use {self.successor}")
        setattr(namespace, self.dest, values)


def _flag_names(command: argparse.ArgumentParser, **names: str) -> None:
    """Which flag (or positional) carries each engine parameter of this command, for error messages."""
    command.set_defaults(flags={**(command.get_default("flags") or {}), **names})


def _add_user(
    command: argparse.ArgumentParser, *, required: bool = True, help_text: str = "the owner (user_id)"
) -> None:
    """``--user``, the one owner flag of every command; ``--user-id`` stays as a hidden, deprecated alias."""
    group = command.add_mutually_exclusive_group(required=required)
    group.add_argument("--user", dest="user", metavar="USER", help=help_text)
    group.add_argument(
        "--user-id", dest="user", metavar="USER", action=_DeprecatedAlias, successor="--user", help=argparse.SUPPRESS
    )
    _flag_names(command, user_id="--user")


# -- output: tables on a terminal, plain lines otherwise ---------------------------------


_WRAPPED_MIN_WIDTH = 20


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def _print_rows(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    wrap: Iterable[str] = (),
) -> None:
    """A table where it fits whole; otherwise the title, a header line and one tab-separated line per row.

    Only the ``wrap`` columns (free text) may wrap in the table; every other column (ids,
    states, numbers) is shown whole, so a terminal too narrow for them gets plain lines,
    as does a pipe. Values are text, never markup.
    """
    cells = [[_cell(value) for value in row] for row in rows]
    wrapping = set(wrap)
    # Whole columns at their widest, free text at 20 or more, one space either side of each
    # value and a rule between and around the columns: what the table needs.
    widths = [
        _WRAPPED_MIN_WIDTH if column in wrapping else max(cell_len(v) for v in [column, *(r[i] for r in cells)])
        for i, column in enumerate(columns)
    ]
    if console.is_terminal and sum(widths) + 3 * len(columns) + 1 <= console.width:
        table = Table(title=Text(title, style="table.title"))
        for column in columns:
            table.add_column(column, no_wrap=column not in wrapping, overflow="fold")
        for row in cells:
            table.add_row(*(Text(value) for value in row))
        console.print(table)
        return
    lines = [[title], list(columns), *cells]
    console.file.write("".join("\t".join(" ".join(v.split()) for v in line) + "\n" for line in lines))  # tabs kept


def _default_dsn() -> str | None:
    return os.environ.get("PRME_DSN") or os.environ.get("DATABASE_URL")


def _require_dsn(args: argparse.Namespace) -> str:
    if not args.dsn:
        if hasattr(args, "pack") and args.pack is None:  # the command also runs on a memory pack: say so
            raise UsageError("no backend given: pass --pack DIR (a memory pack) or --dsn URL (or set PRME_DSN)")
        raise UsageError("no database given: pass --dsn URL or set PRME_DSN (or DATABASE_URL)")
    return str(args.dsn)


#: Seconds a command waits for the database to answer before it gives up: one line, exit 1.
CONNECT_TIMEOUT = 5
#: Seconds between the worker's moves of vectors into the vector index.
INDEX_INTERVAL = 60.0


class DatabaseUnreachable(PrmeError):
    """The database did not accept a connection within CONNECT_TIMEOUT (exit 1, one line)."""


def _connect(dsn: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(dsn, autocommit=True, application_name="prme-pg", connect_timeout=CONNECT_TIMEOUT)
    except psycopg.OperationalError as exc:
        # libpq's first line says what failed; the next ones are hints ("Is the server running ...").
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseUnreachable(f"cannot connect to the database: {reason}") from None


def _reachable(args: argparse.Namespace) -> str:
    """The command's DSN, once a connection to it opened and closed: a pool would retry for its
    whole timeout (30 s) and log every attempt, where a command should fail fast and say why."""
    dsn = _require_dsn(args)
    _connect(dsn).close()
    return dsn


def _pack(args: argparse.Namespace) -> Path | None:
    """The command's --pack folder, if it has that option and it was given. --pack and an
    explicit --dsn conflict; a DSN from the environment gives way to --pack."""
    pack = getattr(args, "pack", None)
    if pack is None:
        return None
    if args.dsn and args.dsn != _default_dsn():
        raise UsageError("pass --pack DIR or --dsn URL, not both")
    return Path(pack)


def _require_pack(pack: Path) -> None:
    """A command that only reads never creates a pack: a missing one is a mistyped path."""
    if not (pack / "pack.duckdb").is_file():
        raise PrmeError(f"no memory pack at {pack}: check --pack (this command does not create one)")


def _client(args: argparse.Namespace, *, reads: bool = False) -> MemoryClient:
    """A one-connection client for a command, after the fail-fast check of :func:`_reachable`;
    or, with --pack, a client of that memory pack. ``reads``: the command only reads, so a
    pack that does not exist is an error (a mistyped path), not a new empty pack."""
    from .client import MemoryClient

    pack = _pack(args)
    if pack is not None:
        if reads:
            _require_pack(pack)
        return MemoryClient(pack)  # a path is always a pack, never a DSN
    return MemoryClient(_reachable(args), min_size=1, max_size=1, timeout=CONNECT_TIMEOUT)


def _json_value(value: object) -> object:
    """Times as RFC 3339 in UTC (``2026-12-06T23:10:55.123456Z``), as the HTTP API writes them."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value)


def _print_json(document: object) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=_json_value) + "\n")


def cmd_migrate(args: argparse.Namespace, console: Console) -> int:
    dsn = _require_dsn(args)
    with _connect(dsn) as conn:
        if args.sql:
            # Review mode: print what would run, change nothing.
            sys.stdout.write(migrations.pending_sql(conn) or "-- nothing to apply\n")
            return EXIT_OK

        def announce(migration: migrations.Migration) -> None:
            if not args.json:
                console.print(f"applying [bold]{escape(migration.filename)}[/bold] ...")

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
    embedding = None if pending else _embedding_status(dsn)
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
                "embedding": embedding,
            }
        )
    else:
        _print_rows(
            console,
            "prme-pg migrations",
            ("version", "file", "state", "applied at"),
            [(f"{s.version:04d}", s.filename, "applied" if s.applied else "pending", s.applied_at) for s in states],
        )
        if pending:
            console.print(f"{len(pending)} migration(s) pending: run prme-pg migrate")
        else:
            console.print("schema is current")
        if embedding is not None:
            console.print(_embedding_line(embedding), markup=False, highlight=False)
    # A check for scripts and deployments: exit 1 while the schema is not current.
    return EXIT_FAILURE if pending else EXIT_OK


def _embedding_status(dsn: str) -> dict[str, Any]:
    """Recall by meaning on this database, for `status`: the configured model and what awaits it."""
    from .client import MemoryClient

    try:
        with MemoryClient(dsn, min_size=1, max_size=1, timeout=CONNECT_TIMEOUT) as memory:
            status = memory.embedding_status()
    except PrmeError as exc:
        return {"error": str(exc)}
    if status is None:
        return {"model_id": None}
    return dataclasses.asdict(status)


def _embedding_line(embedding: dict[str, Any]) -> str:
    if "error" in embedding:
        return f"recall by meaning: unavailable ({_one_line(embedding['error'])}); recall matches words"
    if embedding.get("model_id") is None:
        return "recall by meaning: off (PRME_EMBEDDER=none); recall matches words"
    line = f"recall by meaning: model {embedding['model_id']} ({embedding['dimensions']} dimensions), loaded"
    if not embedding["vector_search"]:
        line += "; no pgvector on the server: recall matches words (docs/RECALL.md)"
    line += f"; {embedding['pending']} memories await a vector"
    if embedding["pending"]:
        line += " (prme-pg embed)"
    if embedding["failed"]:
        line += f"; {embedding['failed']} failed (prme-pg embed --retry-failed)"
    return line


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from .demo import run_demo

    return run_demo(str(args.path), console)


def cmd_serve(args: argparse.Namespace, console: Console) -> int:
    pack = _pack(args)
    if pack is None:
        _require_dsn(args)
    try:
        import uvicorn

        from .aio import AsyncMemoryClient
        from .http import create_app, uvicorn_options
    except ImportError as exc:
        raise UsageError(
            f"the HTTP API needs the http extra: in the prme-pg clone, pip install '.[http]' ({exc})"
        ) from exc
    limits = _serve_limits(args)
    trusted = _serve_trusted(args, pack is not None)
    if pack is not None:
        if args.metrics_port is not None:
            raise UsageError("--metrics-port needs PostgreSQL (its metrics are the connection pool's and the ledger's)")
        from .backends.duckdb import DuckDBBackend

        DuckDBBackend(pack).close()  # fail fast, in one line: another process has it, or it is no pack
        client = AsyncMemoryClient(pack)
    else:
        dsn = _reachable(args)  # fail fast, in one line, before the server and its pool start
        client = AsyncMemoryClient(dsn, max_size=args.pool_size, statement_timeout=args.statement_timeout or None)
    listener = _listen(args)  # bind before announcing: a busy port is one line, exit 1
    where = f"the unix socket {args.uds}" if args.uds else f"http://{_url_host(args.host)}:{args.port}"
    console.print(
        f"serving the prme-pg HTTP API on {where} (OpenAPI at /openapi.json)"
        + (f" over the memory pack at {pack}" if pack is not None else ""),
        markup=False,
        highlight=False,
    )
    if trusted is not None:
        owner = args.default_user if args.default_user is not None else "the payload's user_id"
        console.print(
            f"trusted loopback mode: ledger requests without a token act for {owner} (docs/SECURITY.md)",
            markup=False,
            highlight=False,
        )
    try:
        if args.metrics_port is not None:
            return _serve_with_metrics(args, client, console, limits, trusted, listener)
        app = create_app(client, limits=limits, trusted=trusted)
        config = uvicorn.Config(app, log_level=args.log_level, **uvicorn_options(limits))
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        _unlisten(listener, args.uds)
    return EXIT_OK


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _listen(args: argparse.Namespace) -> Any:
    """The bound socket of serve (or mcp): TCP on --host/--port, or the --uds socket with --uds-mode
    (prme_pg.http.listen; an OSError here is one line, exit 1)."""
    from .http.listen import listen_tcp, listen_unix

    if getattr(args, "uds", None):
        return listen_unix(args.uds, args.uds_mode)
    return listen_tcp(args.host, args.port)


def _unlisten(listener: Any, uds: str | None) -> None:
    listener.close()
    if uds:
        with contextlib.suppress(OSError):
            os.unlink(uds)


def _uds_mode(text: str) -> int:
    from .http.listen import parse_mode

    try:
        return parse_mode(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _serve_trusted(args: argparse.Namespace, on_pack: bool) -> Any:
    """serve --trusted-loopback: the ledger without tokens, on a loopback bind only (docs/SECURITY.md)."""
    if not args.trusted_loopback:
        if args.default_user is not None:
            raise UsageError("--default-user goes with --trusted-loopback")
        return None
    from .http import TrustedLoopback
    from .http.gate import is_loopback

    if on_pack:
        raise UsageError("--trusted-loopback opens the ledger, which needs PostgreSQL (a memory pack has none)")
    if not args.uds and not is_loopback(args.host):
        raise UsageError(
            f"--trusted-loopback serves the ledger without tokens: bind a loopback address "
            f"(--host 127.0.0.1 or ::1) or a unix socket (--uds PATH), not {args.host}"
        )
    if args.default_user is not None and (
        not args.default_user or args.default_user != args.default_user.strip() or len(args.default_user) > 256
    ):
        raise UsageError("--default-user must be 1 to 256 characters without surrounding spaces")
    if args.uds:
        return TrustedLoopback(default_user=args.default_user, unix_socket=True)
    return TrustedLoopback(default_user=args.default_user, host=args.host, port=args.port)


def _serve_with_metrics(
    args: argparse.Namespace, client: Any, console: Console, limits: Any, trusted: Any, listener: Any
) -> int:
    """serve --metrics-port: /metrics (Prometheus, no token) on a bind of its own (docs/HTTP.md)."""
    import asyncio

    from .http import create_app, uvicorn_options
    from .http.listen import listen_tcp
    from .http.metrics import serve
    from .metrics import ServiceMetrics

    metrics = ServiceMetrics(client)
    metrics_listener = listen_tcp(args.metrics_host, args.metrics_port)
    console.print(f"serving Prometheus metrics on http://{args.metrics_host}:{args.metrics_port}/metrics")
    api = create_app(client, limits=limits, metrics=metrics, trusted=trusted)
    asyncio.run(
        serve(
            api,
            metrics,
            host=args.host,
            port=args.port,
            uds=args.uds,
            metrics_host=args.metrics_host,
            metrics_port=args.metrics_port,
            log_level=args.log_level,
            api_options=uvicorn_options(limits),
            sockets=[listener],
            metrics_sockets=[metrics_listener],
        )
    )
    metrics_listener.close()
    return EXIT_OK


def _serve_limits(args: argparse.Namespace) -> Any:
    """The HTTP server's limits from serve's flags (docs/HTTP.md, "Limits")."""
    from .http import Limits

    for flag, value in (
        ("--pool-size", args.pool_size),
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-header-bytes", args.max_header_bytes),
        ("--max-requests-per-owner", args.max_requests_per_owner),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1")
    if not 0 <= args.statement_timeout <= 86400:
        raise UsageError("--statement-timeout must be 0 to 86400 seconds (0: the server's own setting)")
    return Limits(
        max_body_bytes=args.max_body_bytes,
        max_header_bytes=args.max_header_bytes,
        max_requests_per_owner=args.max_requests_per_owner,
        **_connection_limits(args),
    )


def _connection_limits(args: argparse.Namespace) -> dict[str, Any]:
    """serve's and mcp's limits on connections: read deadlines and caps (docs/HTTP.md, "Limits")."""
    for flag, value in (
        ("--request-head-timeout", args.request_head_timeout),
        ("--request-body-timeout", args.request_body_timeout),
        ("--keep-alive-timeout", args.keep_alive_timeout),
    ):
        if not 0 < value <= 3600:
            raise UsageError(f"{flag} must be more than 0 and at most 3600 seconds")
    return {
        "request_head_timeout": args.request_head_timeout,
        "request_body_timeout": args.request_body_timeout,
        "keep_alive_timeout": args.keep_alive_timeout,
        "max_connections": args.max_connections,
        "max_connections_per_peer": args.max_connections_per_peer,
    }


def _add_connection_limits(command: argparse.ArgumentParser, *, per_owner: str) -> None:
    """serve's and mcp's limits on a request's head, an owner's requests and the connections
    (:func:`_connection_limits`; their defaults: prme_pg.http.limits)."""
    command.add_argument(
        "--max-header-bytes",
        type=int,
        default=16 * 1024,
        help="request line and headers limit, else 431 (default 16 KiB)",
    )
    command.add_argument(
        "--max-requests-per-owner",
        type=int,
        default=None,
        help=f"{per_owner} (default: half of --pool-size)",
    )
    command.add_argument(
        "--request-head-timeout",
        type=float,
        default=10.0,
        help="seconds a request line and headers may take to arrive, else 408 and closed (default 10)",
    )
    command.add_argument(
        "--request-body-timeout",
        type=float,
        default=60.0,
        help="seconds a request body may take to arrive after its head, else 408 and closed (default 60)",
    )
    command.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=5.0,
        help="seconds an idle connection stays open between requests (default 5)",
    )
    command.add_argument(
        "--max-connections",
        type=_between(1, 1_000_000),
        default=512,
        help="connections open at once; more are closed when accepted (default 512)",
    )
    command.add_argument(
        "--max-connections-per-peer",
        type=_between(1, 1_000_000),
        default=64,
        help="connections open at once from one client address; more are closed when accepted (default 64)",
    )


def cmd_token_create(args: argparse.Namespace, console: Console) -> int:
    from .tokens import token_sha256

    with _client(args) as memory:
        token = memory.create_api_token(args.user, label=args.label)
    if args.json:
        _print_json({"user_id": args.user, "label": args.label, "token": token, "id": token_sha256(token)})
    else:
        # The token itself goes to stdout alone, so it can be captured; the advice to stderr.
        Console(stderr=True, soft_wrap=True).print(
            f"new bearer token for [bold]{escape(args.user)}[/bold] (shown once; only its sha256 is stored, "
            f"which is its id for `prme-pg token revoke --id`: {token_sha256(token)}):"
        )
        sys.stdout.write(token + "\n")
    return EXIT_OK


#: A token is about 90 characters; anything much longer on stdin is not one.
MAX_TOKEN_TEXT = 4096


def _read_token(path: str | None) -> str:
    """The token to revoke, from ``path`` (a file; ``-`` is stdin) or stdin, never from argv:
    a command line shows in ``ps`` and in the shell's history. On a terminal it is asked for
    without echo."""
    if path is not None and path != "-":
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read(MAX_TOKEN_TEXT + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --token-file {path}: {exc}") from None
    elif sys.stdin.isatty():
        import getpass

        text = getpass.getpass("token to revoke: ")
    else:
        text = sys.stdin.read(MAX_TOKEN_TEXT + 1)
    token = text.strip()
    if not token:
        raise UsageError(
            "no token given: pipe it on stdin (... | prme-pg token revoke), pass --token-file FILE, "
            "or revoke by --user USER --id ID"
        )
    if len(token) > MAX_TOKEN_TEXT or len(token.splitlines()) != 1:
        raise UsageError("expected one token, on one line")
    return token


def _revoke(args: argparse.Namespace) -> bool:
    from .backends import RevokeApiToken

    if args.token is not None:
        # Not echoed: the mistake is already in the shell's history, not also in a log.
        raise UsageError(
            "the token is not taken on the command line (it would show in ps and the shell's history): "
            "pipe it on stdin, pass --token-file FILE, or revoke by --user USER --id ID"
        )
    if args.token_id is None:
        if args.user is not None:
            raise UsageError("--user goes with --id (the token itself names its owner)")
        token = _read_token(args.token_file)
        with _client(args) as memory:
            return memory.revoke_api_token(token)
    if args.user is None or args.token_file is not None:
        raise UsageError("--id needs --user (the token's owner), and no --token-file")
    if not re.fullmatch(r"[0-9a-f]{64}", args.token_id):
        raise UsageError("--id must be the token's id: its sha256, 64 lowercase hex digits")
    with _client(args) as memory:
        return memory.backend.execute(RevokeApiToken(user_id=args.user, token_sha256=args.token_id))


def cmd_token_revoke(args: argparse.Namespace, console: Console) -> int:
    revoked = _revoke(args)
    if args.json:
        _print_json({"revoked": revoked})
    else:
        console.print("revoked" if revoked else "no live token matched (malformed, unknown or already revoked)")
    return EXIT_OK if revoked else EXIT_FAILURE


def cmd_worker(args: argparse.Namespace, console: Console) -> int:
    from .worker import WorkerStats, run_shard_workers, run_worker

    shards = list(args.shards or [])
    if args.cluster:
        from . import shard

        with _connect(args.cluster) as conn:
            shards += shard.cluster_definition(conn).shards
    if shards:
        # One executor per shard, listening on the shard (the proxy hears no NOTIFY); each
        # embeds its shard's memories and long memories' parts, as a single worker does.
        with contextlib.ExitStack() as stack:
            per_shard: dict[str, dict[str, object]] = {}
            for shard_dsn in shards:
                embed, embedder = _worker_embedding(stack, shard_dsn, console, quiet=args.json)
                per_shard[shard_dsn] = {"after_commit": embed, "embedder": embedder}
            finished = run_shard_workers(
                shards, worker=args.worker, batch=args.batch, until_idle=args.until_idle, per_shard=per_shard
            )
        if args.json:
            _print_json({"finished": finished, "shards": len(shards)})
        else:
            console.print(f"workers of {len(shards)} shard(s) stopped after finishing {finished} operation(s)")
        return EXIT_OK
    dsn = _reachable(args)

    def progress(stats: WorkerStats) -> None:
        if not args.json and stats.last.claimed:
            console.print(
                f"batch {stats.batches}: committed {stats.committed}, rejected {stats.rejected}, "
                f"blocked {stats.blocked}, retrying {stats.retry}"
            )

    with contextlib.ExitStack() as stack:
        embed, embedder = _worker_embedding(stack, dsn, console, quiet=args.json)
        finished = run_worker(
            dsn,
            worker=args.worker,
            batch=args.batch,
            until_idle=args.until_idle,
            on_progress=progress,
            after_commit=embed,
            embedder=embedder,
        )
    if args.json:
        _print_json({"finished": finished})
    else:
        console.print(f"worker stopped after finishing {finished} operation(s)")
    return EXIT_OK


def _worker_embedding(
    stack: contextlib.ExitStack, dsn: str, console: Console, *, quiet: bool
) -> tuple[Callable[[], object] | None, Embedder | None]:
    """What the worker runs after it commits: vectors for the memories that have none (the ledger's
    executor writes memories in SQL, without them); and the embedder of long memories' parts.
    None and None when PRME_EMBEDDER=none."""
    from .client import MemoryClient
    from .embedding_worker import embed_pending

    memory = stack.enter_context(MemoryClient(dsn, min_size=1, max_size=1, timeout=CONNECT_TIMEOUT))
    if memory.embedder is None:
        return None, None

    indexed_at = -INDEX_INTERVAL

    def embed() -> None:
        nonlocal indexed_at
        # Moving vectors into the index reads every owner's unindexed ones: once a minute.
        index = time.monotonic() - indexed_at >= INDEX_INTERVAL
        summary = embed_pending(memory, count=False, index=index)
        if index:
            indexed_at = time.monotonic()
        if summary.embedded or summary.failed or summary.indexed:
            log_line = f"embedded {summary.embedded} memories ({summary.failed} failed) with {summary.model_id}" + (
                f", {summary.indexed} vectors moved into the index" if summary.indexed else ""
            )
            if not quiet:
                console.print(log_line, markup=False, highlight=False)

    return embed, memory.embedder


def cmd_add(args: argparse.Namespace, console: Console) -> int:
    """Add one memory (and, with --evidence, the user's words as its evidence)."""
    with _client(args) as memory:
        node = memory.add_node(args.content, user_id=args.user, scope=args.scope, kind=args.kind)
        event = None
        if args.evidence is not None:
            event = memory.add_event(args.evidence, user_id=args.user, scope=args.scope)
            node = memory.reinforce(node.id, event.id, user_id=args.user)
    if args.json:
        document: dict[str, Any] = {"node": dataclasses.asdict(node)}
        if event is not None:
            document["evidence"] = dataclasses.asdict(event)
        _print_json(document)
    else:
        # The id alone on stdout, so a script can capture it; what was stored on stderr.
        sys.stdout.write(f"{node.id}\n")
        Console(stderr=True, soft_wrap=True).print(
            f"added for {args.user} in scope {node.scope}: {node.content}", markup=False, highlight=False
        )
    return EXIT_OK


def cmd_recall(args: argparse.Namespace, console: Console) -> int:
    with _client(args, reads=True) as memory:
        hits = memory.recall(args.query, user_id=args.user, scopes=args.scope or None, max_count=args.limit)
    if args.json:
        _print_json({"hits": [dataclasses.asdict(hit) for hit in hits]})
    else:
        _print_rows(
            console,
            f"recall for {args.user}",
            ("rank", "score", "id", "scope", "content"),
            [(hit.rank, f"{hit.score:.4f}", hit.id, hit.scope, hit.content) for hit in hits],
            wrap=("content",),
        )
        console.print(f"{len(hits)} memor{'y' if len(hits) == 1 else 'ies'}")
    return EXIT_OK


def cmd_embed(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .embedding_worker import embed_pending

    err = Console(stderr=True)
    with _client(args) as memory:
        embedder = memory.embedder
        if embedder is None:
            raise UsageError("no embedder is configured (PRME_EMBEDDER=none): nothing to embed with")
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            disable=args.json or not err.is_terminal,
        )
        with progress:
            task = progress.add_task(f"embedding with {embedder.model_id}", total=None)
            summary = embed_pending(
                memory,
                batch_size=args.batch,
                retry_failed=args.retry_failed,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
                index_min_vectors=args.index_min_vectors,
            )
    if args.json:
        _print_json(dataclasses.asdict(summary))
        return EXIT_OK
    rate = summary.embedded / summary.seconds if summary.seconds else 0.0
    console.print(
        f"{summary.embedded} embedded, {summary.failed} failed with {summary.model_id} "
        f"in {summary.seconds:.1f} s ({rate:,.0f}/s); {summary.pending} await a vector"
        + (f"; {summary.indexed} moved into the vector index" if summary.indexed else "")
    )
    if summary.failed:
        console.print("failed memories are recorded; run again with --retry-failed to try them once more")
    if not summary.vector_search:
        console.print("this server has no pgvector: vectors are kept, recall matches words only (docs/RECALL.md)")
    return EXIT_OK


def cmd_snapshot_publish(args: argparse.Namespace, console: Console) -> int:
    with _client(args) as memory:
        result = memory.publish_snapshot(
            args.scope,
            user_id=args.user,
            max_items=args.max_items,
            max_bytes=args.max_bytes,
            expected_generation_id=args.expect,
        )
    if args.json:
        _print_json(dataclasses.asdict(result))
    else:
        state = "published" if result.advanced else "unchanged (already current)"
        console.print(
            f"{state}: generation {result.generation_id} (seq {result.seq}, "
            f"{result.item_count} items, {result.byte_size} bytes)"
        )
    return EXIT_OK


def cmd_snapshot_show(args: argparse.Namespace, console: Console) -> int:
    with _client(args, reads=True) as memory:
        snapshot = memory.current_snapshot(args.scope, user_id=args.user)
    if args.json:
        _print_json({**dataclasses.asdict(snapshot), "document": json.loads(snapshot.document)})
    else:
        fields = ("generation_id", "seq", "item_count", "byte_size", "created_at", "advanced_at")
        _print_rows(
            console,
            f"snapshot {args.scope} of {args.user}",
            ("field", "value"),
            [(name, getattr(snapshot, name)) for name in fields],
        )
        items = json.loads(snapshot.document).get("items", [])
        for item in items:
            console.print(f"- {item.get('content', '')}", markup=False, highlight=False)
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace, console: Console) -> int:
    from .outbox import Outbox

    text = args.payload if args.payload is not None else sys.stdin.read()
    try:
        payload = loads_bounded(text, "the payload")  # never a RecursionError, however deep
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(payload, dict):
        raise UsageError("the payload must be a JSON object")
    record = Outbox(args.pack).enqueue(
        args.kind, payload, user_id=args.user, dependencies=args.depends_on, operation_id=args.operation_id
    )
    if args.json:
        _print_json(record.document())
    else:
        # The id alone on stdout, so a script can capture it; where it stands on stderr.
        sys.stdout.write(f"{record.operation_id}\n")
        Console(stderr=True, soft_wrap=True).print(
            f"{record.kind} for {record.user_id}: {record.state} in {args.pack}", markup=False, highlight=False
        )
    return EXIT_OK


def cmd_sync(args: argparse.Namespace, console: Console) -> int:
    import logging

    from rich.logging import RichHandler
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .outbox import AfterCommit, OutboxSyncer, Stage, SyncProgress

    dsn = _require_dsn(args)
    err = Console(stderr=True)
    err.soft_wrap = not err.is_terminal
    if not args.json:
        logging.basicConfig(
            level=logging.INFO, format="%(message)s", handlers=[RichHandler(console=err, show_path=False)]
        )
    # Extension point: other capabilities add their cycle stages and after-commit callbacks here.
    learning = _learning_sync(args)  # docs/LEARNING.md: extraction before delivery, publishing after commit
    stages: list[Stage] = [learning.stage]
    after_commit: list[AfterCommit] = [learning.after_commit]
    syncer = OutboxSyncer(
        args.pack,
        dsn,
        stages=stages,
        after_commit=after_commit,
        batch_size=args.batch,
        poll_interval=args.poll_interval,
    )
    syncer.acquire()  # SyncLockHeld (exit 1) when another worker has this pack
    # A bar on a terminal; piped (a log, a supervisor), one plain line per finished phase instead.
    bars = err.is_terminal and not args.json
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not bars,
    )
    tasks: dict[str, Any] = {}
    if not args.json:
        until = "one cycle" if args.once else "until SIGTERM or Ctrl-C"
        err.print(f"syncing the outbox of {syncer.outbox.pack} ({until})", markup=False, highlight=False)

    def on_progress(update: SyncProgress) -> None:
        if update.total == 0:
            return
        label = {"submit": "submitting pending", "poll": "polling accepted"}.get(update.phase, update.phase)
        if not bars:
            if not args.json and update.done == update.total:
                err.print(f"{label}: {update.done}/{update.total}", markup=False, highlight=False)
            return
        finished = {task.id for task in progress.tasks if task.finished}
        if update.phase in tasks and tasks[update.phase] in finished:
            progress.remove_task(tasks.pop(update.phase))  # a new cycle: one bar per phase, not one per cycle
        if update.phase not in tasks:
            tasks[update.phase] = progress.add_task(label, total=update.total)
        progress.update(tasks[update.phase], completed=update.done, total=update.total)

    syncer.on_progress = on_progress
    try:
        with progress, _queue_metrics(args):
            report = syncer.run(once=args.once)
    finally:
        syncer.close()
    counts = syncer.outbox.counts()
    if args.json:
        _print_json(
            {
                "report": report.summary(),
                "outbox": {state: {"count": n, "oldest": oldest} for state, (n, oldest) in counts.items()},
            }
        )
    else:
        _print_rows(
            console,
            f"outbox of {syncer.outbox.pack}",
            ("state", "records", "oldest"),
            [(state, n, oldest) for state, (n, oldest) in counts.items()],
        )
        summary = report.summary()
        console.print(", ".join(f"{name} {value}" for name, value in summary.items()))
    return EXIT_OK


def _updates_text(updates: dict[str, Any]) -> str:
    return "; ".join(f"{field}: {change.get('from')} -> {change.get('to')}" for field, change in updates.items())


def _patch_document(patch: MaintenancePatch) -> dict[str, Any]:
    return {"patch_id": patch.patch_id, "created_at": patch.created_at, "as_of": patch.as_of, "ops": list(patch.ops)}


def _print_patch(console: Console, patch: MaintenancePatch, user: str) -> None:
    rows = []
    for op in patch.ops:
        target = op.get("target", {})
        rows.append(
            (
                op.get("op_id"),
                op.get("op"),
                target.get("content", target.get("node_id", "")),
                _updates_text(op.get("updates", {})),
                op.get("reason", ""),
                op.get("risk"),
                "yes" if op.get("requires_review") else "no",
                "yes" if op.get("default_selected") else "no",
                op.get("status", "pending"),
            )
        )
    _print_rows(
        console,
        f"maintenance patch {patch.patch_id} for {user}",
        ("op_id", "op", "memory", "updates", "reason", "risk", "review", "selected", "status"),
        rows,
        wrap=("memory", "updates", "reason"),
    )
    console.print(f"{len(patch.ops)} op{'' if len(patch.ops) == 1 else 's'}")


def _print_applied(console: Console, applied: list[AppliedOp], title: str) -> None:
    _print_rows(
        console,
        title,
        ("op_id", "op", "node_id", "status", "detail"),
        [(row.op_id, row.op, row.node_id, row.status, row.detail) for row in applied],
        wrap=("detail",),
    )
    counts = {status: sum(1 for row in applied if row.status == status) for status in ("applied", "already_applied")}
    stale = len(applied) - sum(counts.values())
    console.print(f"{counts['applied']} applied, {counts['already_applied']} already applied, {stale} stale")


def cmd_maintain(args: argparse.Namespace, console: Console) -> int:
    if _pack(args) is None:
        _require_dsn(args)
    if args.report and args.mode == "auto":
        raise UsageError("--report changes nothing: it cannot be combined with --mode=auto")
    with _client(args, reads=args.report) as memory:
        if args.report:
            rows = memory.maintenance_report(user_id=args.user)
            if args.json:
                _print_json({"recommendations": [dataclasses.asdict(row) for row in rows]})
                return EXIT_OK
            lines = []
            for row in rows:
                stability = row.stability
                if row.suggested_stability and row.suggested_stability != row.stability:
                    stability += f" -> {row.suggested_stability}"
                confidence = str(row.confidence_base)
                if row.suggested_confidence is not None and row.suggested_confidence != row.confidence_base:
                    confidence += f" -> {row.suggested_confidence}"
                lines.append(
                    (
                        row.node_id,
                        ", ".join(row.recommendations),
                        stability,
                        confidence,
                        row.overdue_cycles or 0,
                        row.explicit_reinforcements,
                        row.implicit_successes,
                        row.explicit_corrections,
                    )
                )
            _print_rows(
                console,
                f"maintenance report for {args.user}",
                ("node_id", "recommendations", "stability", "confidence", "overdue", "+R", "+S", "-C"),
                lines,
            )
            console.print(f"{len(rows)} memor{'y' if len(rows) == 1 else 'ies'} with recommendations; nothing changed")
            return EXIT_OK
        patch = memory.maintenance_patch(user_id=args.user)
        applied = memory.apply_patch(patch.patch_id, user_id=args.user, mode="auto") if args.mode == "auto" else None
        if applied is not None:
            patch = memory.get_patch(patch.patch_id, user_id=args.user)
    if args.json:
        document: dict[str, Any] = {"patch": _patch_document(patch)}
        if applied is not None:
            document["applied"] = [dataclasses.asdict(row) for row in applied]
        _print_json(document)
        return EXIT_OK
    _print_patch(console, patch, args.user)
    if applied is not None:
        _print_applied(console, applied, "applied in auto mode")
    elif patch.ops:
        # The ops the review selects by default (else every op), on the same target as this run.
        chosen = [str(op["op_id"]) for op in patch.ops if op.get("default_selected")] or [
            str(op["op_id"]) for op in patch.ops
        ]
        target = [f"--user {shlex.quote(args.user)}"]
        if _pack(args) is not None:
            target.append(f"--pack {shlex.quote(str(args.pack))}")
        elif args.dsn != _default_dsn():
            target.append(f"--dsn {shlex.quote(str(args.dsn))}")
        console.print(
            escape(f"written for review; apply with: prme-pg curate {patch.patch_id} {' '.join(target)} ")
            + f"--select {','.join(chosen)}",
            soft_wrap=True,  # a command to copy: never broken into lines
        )
    return EXIT_OK


def cmd_curate(args: argparse.Namespace, console: Console) -> int:
    with _client(args) as memory:
        if args.select is None:
            patch = memory.get_patch(args.patch_id, user_id=args.user)
            if args.json:
                _print_json(_patch_document(patch))
            else:
                _print_patch(console, patch, args.user)
            return EXIT_OK
        op_ids = [part.strip() for part in args.select.split(",") if part.strip()]
        if not op_ids:
            raise UsageError("--select needs at least one op id, e.g. --select op_001,op_003")
        applied = memory.apply_patch(args.patch_id, op_ids, user_id=args.user, mode="manual")
    if args.json:
        _print_json({"patch_id": args.patch_id, "applied": [dataclasses.asdict(row) for row in applied]})
    else:
        _print_applied(console, applied, f"curated patch {args.patch_id}")
    # A stale op is a reviewed change that could not be made: the caller should know.
    return EXIT_FAILURE if any(row.status == "stale" for row in applied) else EXIT_OK


def cmd_mcp(args: argparse.Namespace, console: Console) -> int:
    """Serve the MCP tools over stdio or streamable HTTP (docs/MCP.md)."""
    import anyio

    if args.pack and args.dsn:
        raise UsageError("pass --pack DIR or --dsn URL, not both")
    target = str(args.pack) if args.pack else args.dsn or _default_dsn()
    if not target:
        raise UsageError("no backend given: pass --pack DIR (a memory pack) or --dsn URL (or set PRME_DSN)")
    try:
        from . import mcp_server
    except ImportError as exc:
        raise UsageError(
            f"the MCP server needs the mcp extra: in the prme-pg clone, pip install '.[mcp]' ({exc})"
        ) from exc
    if args.transport == "stdio" and args.user is None:
        raise UsageError("stdio serves one owner: pass --user")
    from .http.limits import Limits

    for flag, value in (("--max-header-bytes", args.max_header_bytes), ("--pool-size", args.pool_size)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1")
    if args.max_requests_per_owner is not None and args.max_requests_per_owner < 1:
        raise UsageError("--max-requests-per-owner must be at least 1")
    limits = Limits(
        max_header_bytes=args.max_header_bytes,
        max_requests_per_owner=args.max_requests_per_owner,
        **_connection_limits(args),
    )
    listener = None
    if args.transport == "http":
        if args.user is not None and not mcp_server.is_loopback(args.host):
            raise UsageError(
                f"--user over HTTP serves that owner to anyone who reaches {args.host}: bind a loopback "
                "address (--host 127.0.0.1), or leave --user out and use bearer tokens"
            )
        listener = _listen(args)  # bind before announcing: a busy port is one line, exit 1
        owner = f"as {escape(args.user)}" if args.user else "for the bearer token's owner"
        Console(stderr=True).print(f"serving MCP on http://{_url_host(args.host)}:{args.port}/mcp {owner}")
    try:
        anyio.run(
            lambda: mcp_server.run(
                target,
                user_id=args.user,
                transport=args.transport,
                host=args.host,
                port=args.port,
                pool_size=args.pool_size,
                log_level=args.log_level,
                limits=limits,
                sock=listener,
            )
        )
    finally:
        if listener is not None:
            listener.close()
    return EXIT_OK


def cmd_schedule(args: argparse.Namespace, console: Console) -> int:
    """Print (or with --apply install) the pg_cron jobs of the executor, the vector index and nightly maintenance."""
    from . import schedule

    names = [schedule.EXECUTOR_JOB, schedule.INDEX_JOB, args.maintenance_job]
    try:
        jobs = (
            []
            if args.remove
            else [
                schedule.executor_job(schedule=args.executor_schedule, batch=args.batch),
                schedule.index_job(schedule=args.index_schedule, min_vectors=args.index_min_vectors),
            ]
        )
        if args.users and not args.remove:
            jobs.append(
                schedule.maintenance_job(args.users, schedule=args.maintenance_schedule, name=args.maintenance_job)
            )
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None
    if not args.apply:
        database = args.database or (_dsn_database(args.dsn) if args.dsn else None)
        if not database:
            raise UsageError("name the database prme lives in: --database NAME, or --dsn URL")
        if args.remove:
            sys.stdout.write(schedule.render_unschedule(names, database=database))
        elif args.json:
            _print_json({"database": database, "username": args.run_as, "jobs": [dataclasses.asdict(j) for j in jobs]})
        else:
            sys.stdout.write(schedule.render(jobs, database=database, username=args.run_as))
        return EXIT_OK
    dsn = _require_dsn(args)
    cron_dsn, database = schedule.cron_dsn(dsn)
    database = args.database or database
    cron_dsn = args.cron_dsn or cron_dsn
    if args.remove:
        removed = schedule.unschedule(cron_dsn, names, database=database)
        if args.json:
            _print_json({"database": database, "removed": removed})
        else:
            console.print(f"removed {len(removed)} job(s): {', '.join(removed) or 'none was scheduled'}")
        return EXIT_OK
    installed = schedule.apply(cron_dsn, jobs, database=database, username=args.run_as)
    if args.json:
        _print_json({"database": database, "jobs": [{"name": n, "jobid": j} for n, j in installed]})
    else:
        table = Table(title=f"pg_cron jobs for database {escape(database)}")
        for column in ("job", "id", "schedule", "runs"):
            table.add_column(column)
        for job, (_, jobid) in zip(jobs, installed, strict=True):
            table.add_row(job.name, str(jobid), job.schedule, escape(job.command))
        console.print(table)
    return EXIT_OK


def _queue_metrics(args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """sync --metrics-textfile: the pack's queue depths for node_exporter's textfile collector."""
    if args.metrics_textfile is None:
        return contextlib.nullcontext()
    if args.metrics_interval <= 0:
        raise UsageError("--metrics-interval must be positive")
    try:
        from .metrics import TextfileWriter, queue_registry
    except ImportError as exc:
        raise UsageError(
            f"metrics need prometheus-client: in the prme-pg clone, pip install '.[http]' ({exc})"
        ) from exc
    writer = TextfileWriter(args.metrics_textfile, queue_registry(args.pack), interval=args.metrics_interval)
    try:
        writer.write()  # an unwritable path is a usage error before any work starts
    except OSError as exc:
        raise UsageError(f"--metrics-textfile: cannot write {args.metrics_textfile}: {exc.strerror}") from None
    return writer.running()


def _dsn_database(dsn: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn).get("dbname") or None  # type: ignore[return-value]
    except psycopg.ProgrammingError as exc:
        raise UsageError(f"--dsn is not a valid connection string: {exc}") from None


def _learning_sync(args: argparse.Namespace) -> LearningSync:
    from datetime import timedelta

    if args.stale_after <= 0:
        raise UsageError("--stale-after must be positive")
    try:
        return LearningSync(args.pack, extractor=args.extractor, stale_after=timedelta(seconds=args.stale_after))
    except InvalidInput as exc:  # an extractor name nothing registered
        raise UsageError(str(exc)) from None


def cmd_queue_status(args: argparse.Namespace, console: Console) -> int:
    if args.rejected:
        return _print_rejected(args, console)
    status = queue_status(args.pack)
    if args.json:
        _print_json(
            {
                queue: {
                    state: {"count": n, "oldest": oldest.isoformat() if oldest else None}
                    for state, (n, oldest) in counts.items()
                }
                for queue, counts in status.items()
            }
        )
        return EXIT_OK
    _print_rows(
        console,
        f"queues of {args.pack}",
        ("queue", "state", "records", "oldest (last written)"),
        [(queue, state, n, oldest) for queue, counts in status.items() for state, (n, oldest) in counts.items()],
    )
    return EXIT_OK


def _print_rejected(args: argparse.Namespace, console: Console) -> int:
    rejected = rejected_records(args.pack)
    if args.json:
        _print_json(
            {"rejected": [dataclasses.asdict(r) | {"rejected_at": r.rejected_at.isoformat()} for r in rejected]}
        )
        return EXIT_OK
    _print_rows(
        console,
        f"rejected records of {args.pack}",
        ("queue", "id", "user", "kind", "rejected at", "reason"),
        [(r.queue, r.record_id, r.user_id, r.kind, r.rejected_at, r.reason) for r in rejected],
        wrap=("reason",),
    )
    console.print(f"{len(rejected)} rejected record(s)")
    return EXIT_OK


def cmd_hook(args: argparse.Namespace, console: Console) -> int:
    """Store one learning record from the JSON document on stdin; print its id (docs/LEARNING.md)."""
    try:
        record = LearningQueue(args.pack).enqueue_document(read_hook_document(sys.stdin.buffer), user_id=args.user)
    except InvalidInput as exc:
        _error_line("invalid hook document", str(exc))
        return EXIT_USAGE
    sys.stdout.write(f"{record.record_id}\n")
    return EXIT_OK


# -- journal: verify, and anchor outside the database (docs/JOURNAL.md) ------------------


def _journal_client(args: argparse.Namespace) -> MemoryClient:
    from .client import MemoryClient

    if args.pack is not None:
        _require_pack(Path(args.pack))  # the journal commands only read
        return MemoryClient(Path(args.pack))  # a path is always a pack, never a DSN
    return _client(args)  # fails fast, in one line, when the database does not answer


def _journal_findings(
    memory: MemoryClient, user_id: str, head: JournalHead | None = None
) -> tuple[list[JournalRecord], list[tuple[str, JournalIssue]]]:
    """The owner's records, and every problem: the engine's own check, Python's independent
    one, and (with a head) whether the journal still holds what the head anchored."""
    from .journal import verify_against, verify_records

    records, nodes = memory.journal_records(user_id=user_id)
    findings = [("engine", issue) for issue in memory.verify_journal(user_id=user_id)]
    findings += [("independent", issue) for issue in verify_records(records, nodes)]
    if head is not None:
        findings += [("anchor", issue) for issue in verify_against(head, records)]
    return records, findings


def _print_findings(console: Console, title: str, findings: list[tuple[str, JournalIssue]]) -> None:
    table = Table(title=title)
    for column in ("source", "node_id", "version", "problem", "detail"):
        table.add_column(column)
    for source, issue in findings:
        table.add_row(source, str(issue.node_id), str(issue.node_version), issue.problem, escape(issue.detail))
    console.print(table)


def _findings_json(findings: list[tuple[str, JournalIssue]]) -> list[dict[str, Any]]:
    return [{"source": source, **dataclasses.asdict(issue)} for source, issue in findings]


def cmd_journal_head(args: argparse.Namespace, console: Console) -> int:
    from .journal import journal_head

    output = Path(args.output) if args.output else None
    if output is not None and output.exists():
        raise PrmeError(f"{output} exists: a head is never overwritten; choose another file")
    with _journal_client(args) as memory:
        records, findings = _journal_findings(memory, args.user)
    if findings:
        if args.json:
            _print_json({"user_id": args.user, "verifies": False, "problems": _findings_json(findings)})
        else:
            _print_findings(console, f"journal of {escape(args.user)}", findings)
        raise PrmeError(f"the journal of {args.user} does not verify: not anchoring it")
    head = journal_head(args.user, records)
    document = head.to_document()
    if output is not None:
        try:
            with output.open("x", encoding="utf-8") as file:  # "x": never replace an anchor
                file.write(json.dumps(document, indent=2) + "\n")
        except FileExistsError:
            raise PrmeError(f"{output} exists: a head is never overwritten; choose another file") from None
        except OSError as exc:
            raise PrmeError(f"cannot write {output}: {exc.strerror or exc}") from None
    if args.json:
        _print_json(document)
    else:
        console.print(
            f"journal head of {escape(args.user)}: {head.records} record(s) in {len(head.chains)} chain(s), "
            f"digest {head.digest}"
        )
        console.print(f"written to {escape(str(output))}" if output else "pass --output FILE to keep it")
    return EXIT_OK


def _read_head(path: str) -> JournalHead:
    from .journal import JournalHead

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PrmeError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PrmeError(f"{path}: not a journal head (not UTF-8 text)") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PrmeError(f"{path}: not a journal head (not JSON: {exc})") from None
    try:
        return JournalHead.from_document(document)
    except ValueError as exc:
        raise PrmeError(f"{path}: {exc}") from None


def cmd_journal_verify(args: argparse.Namespace, console: Console) -> int:
    head = _read_head(args.against) if args.against else None
    if head is not None and head.user_id != args.user:
        raise PrmeError(f"{args.against} anchors the journal of {head.user_id}, not of {args.user}")
    with _journal_client(args) as memory:
        records, findings = _journal_findings(memory, args.user, head)
    chains = len({r.node_id for r in records})
    if args.json:
        against = None if head is None else {"file": args.against, "digest": head.digest, "records": head.records}
        _print_json(
            {
                "user_id": args.user,
                "records": len(records),
                "chains": chains,
                "verifies": not findings,
                "against": against,
                "problems": _findings_json(findings),
            }
        )
    elif findings:
        _print_findings(console, f"journal of {escape(args.user)}", findings)
        console.print(f"{len(findings)} problem(s)")
    else:
        console.print(f"the journal of {escape(args.user)} verifies: {len(records)} record(s) in {chains} chain(s)")
        if head is not None:
            console.print(
                f"it holds every record the head {escape(args.against)} anchored "
                f"({head.records} record(s), digest {head.digest})"
            )
    return EXIT_FAILURE if findings else EXIT_OK


# -- import and export: JSON Lines of memories (docs/IMPORT.md) ------------------------


class _CountingReader:
    """A binary stream that counts the bytes read, for the progress bar."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.read_bytes = 0

    def readline(self, limit: int = -1, /) -> bytes:
        line: bytes = self.stream.readline(limit)
        self.read_bytes += len(line)
        return line


def cmd_import(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from .bulk import ImportSummary, import_lines, read_lines

    err = Console(stderr=True)
    if args.file == "-":
        stream: Any = sys.stdin.buffer
        total = None
    else:
        stream = Path(args.file).open("rb")  # noqa: SIM115 -- closed below
        total = os.fstat(stream.fileno()).st_size
    reader = _CountingReader(stream)
    bar = Progress(
        TextColumn("importing"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[memories]} memories"),
        TimeElapsedColumn(),
        console=err,
        disable=args.json or not err.is_terminal,
    )
    task = bar.add_task("import", total=total, memories=0)
    reported = 0

    def on_progress(summary: ImportSummary) -> None:
        nonlocal reported
        for skipped in summary.skipped[reported:]:  # never silently: each skipped line, as it happens
            if not args.json:
                _error_line("skipped", f"line {skipped['line']}: {skipped['error']}")
        reported = len(summary.skipped)
        bar.update(task, completed=reader.read_bytes, memories=summary.created + summary.replayed)

    try:
        with bar, _client(args) as memory:
            summary = import_lines(
                memory,
                read_lines(reader),
                format=args.format,
                default_user=args.user,
                skip_invalid=args.skip_invalid,
                batch_size=args.batch_size,
                on_progress=on_progress,
            )
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if args.json:
        _print_json(summary.to_document())
    else:
        document = summary.to_document()
        console.print(
            f"{summary.lines} line(s): {summary.created} memories created, {summary.replayed} already there, "
            f"{len(summary.skipped)} skipped, for {document['owners']} owner(s) in {summary.seconds:.1f} s",
            markup=False,
            highlight=False,
        )
    return EXIT_OK


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from .bulk import export_lines

    output = None if args.output == "-" else Path(args.output)
    if output is not None and output.exists():
        raise PrmeError(f"{output} exists: choose another file")
    count = 0
    with _client(args) as memory:
        lines = export_lines(memory, args.user, include_archived=args.include_archived, journal=not args.no_journal)
        with contextlib.ExitStack() as stack:
            out = sys.stdout if output is None else stack.enter_context(output.open("x", encoding="utf-8"))
            for line in lines:
                out.write(line + "\n")
                count += 1
    summary = {"user_id": args.user, "memories": count, "output": args.output}
    if output is None:  # the lines went to standard output: the summary goes to standard error
        Console(stderr=True).print(f"exported {count} memories of {args.user}", markup=False, highlight=False)
    elif args.json:
        _print_json(summary)
    else:
        console.print(f"exported {count} memories of {args.user} to {output}", markup=False, highlight=False)
    return EXIT_OK


# -- shard: the PL/Proxy tier (docs/SCALING.md) ----------------------------------------


def cmd_shard_init(args: argparse.Namespace, console: Console) -> int:
    from . import shard

    with _connect(_require_dsn(args)) as conn:
        definition = shard.init_cluster(conn, args.shards, args.partitions)
    if args.json:
        _print_json({"partitions": list(definition.partitions)})
    else:
        for dsn in definition.shards:
            numbers = definition.partitions_of(dsn)
            console.print(f"{escape(dsn)}: {len(numbers)} partition(s) {numbers}")
    return EXIT_OK


def cmd_shard_generate(args: argparse.Namespace, console: Console) -> int:
    from . import proxy

    with _connect(_require_dsn(args)) as conn:
        script = proxy.generate(conn)
    if args.output == "-":
        sys.stdout.write(script)
    else:
        Path(args.output).write_text(script, encoding="utf-8")
        if not args.json:
            console.print(f"wrote {escape(args.output)}")
    return EXIT_OK


def cmd_shard_migrate(args: argparse.Namespace, console: Console) -> int:
    from . import shard

    def announce(dsn: str) -> None:
        if not args.json:
            console.print(f"migrating [bold]{escape(dsn)}[/bold] ...")

    with _connect(_require_dsn(args)) as conn:
        applied = shard.migrate_cluster(conn, on_shard=announce)
    if args.json:
        _print_json({"applied": {dsn: [m.filename for m in done] for dsn, done in applied.items()}})
    else:
        console.print(f"{len(applied)} shard(s) current; the proxy functions were installed from their catalog")
    return EXIT_OK


def cmd_shard_status(args: argparse.Namespace, console: Console) -> int:
    from . import shard

    with _connect(_require_dsn(args)) as conn:
        statuses = shard.cluster_status(conn)
    digests = {s.defaults_digest for s in statuses if s.up}
    if args.json:
        _print_json({"shards": [s.as_json() for s in statuses], "defaults_agree": len(digests) <= 1})
    else:
        rows = [
            (
                s.shard,
                ",".join(map(str, s.partitions)),
                "up" if s.up else f"down: {s.error}",
                s.migrations[-1] if s.migrations else "-",
                "-" if s.accepts_writes is None else str(s.accepts_writes).lower(),
                "-" if s.ready is None else f"{s.ready} ready, {s.blocked} blocked, {s.processing} processing",
            )
            for s in statuses
        ]
        _print_rows(console, "shards", ("shard", "partitions", "state", "migration", "writes", "ledger"), rows)
        if len(digests) > 1:
            console.print("the shards' '*' maintenance defaults differ (docs/SCALING.md, 'What is cluster-wide')")
    return EXIT_OK if all(s.up for s in statuses) else EXIT_FAILURE


def cmd_shard_locate(args: argparse.Namespace, console: Console) -> int:
    from . import shard

    with _connect(_require_dsn(args)) as conn:
        number, dsn, moved = shard.locate(conn, args.user)
    if args.json:
        _print_json({"user_id": args.user, "partition": number, "shard": dsn, "moved": moved})
    else:
        console.print(f"{escape(args.user)}: partition {number}{' (moved)' if moved else ''} on {escape(dsn)}")
    return EXIT_OK


def cmd_shard_move(args: argparse.Namespace, console: Console) -> int:
    from . import shard

    with _connect(_require_dsn(args)) as conn:
        moved = shard.move_owner(conn, args.user, args.to)
    if args.json:
        _print_json(dataclasses.asdict(moved))
    else:
        console.print(
            f"moved {escape(moved.user_id)} to {escape(moved.target)} (partition {moved.partition}): "
            f"{sum(moved.rows.values())} row(s), {moved.events} event(s) up to seq {moved.last_seq}"
        )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="prme-pg",
        description="prme-pg: a PostgreSQL-native memory engine for AI agents.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"prme-pg {__version__}")
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

    demo = add("demo", "Confirm a memory twice, as after a lost response, on a local pack; verify it.", cmd_demo)
    demo.add_argument("path", nargs="?", default="./memories", help="memory pack folder (default ./memories)")

    serve = add("serve", "Serve the HTTP API (needs the http extra).", cmd_serve)
    add_dsn(serve)
    serve.add_argument("--pack", default=None, help="serve a memory pack folder instead of a database (default: none)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=_between(1, 65535), default=8080, help="TCP port to listen on")
    serve.add_argument(
        "--uds",
        default=None,
        metavar="PATH",
        help="listen on this unix socket instead of --host and --port (default: none)",
    )
    serve.add_argument(
        "--uds-mode",
        type=_uds_mode,
        default=0o600,
        metavar="MODE",
        help="the --uds socket's file mode, set after binding: 600 (this user) or 660 (its group) (default 600)",
    )
    serve.add_argument("--pool-size", type=_between(1, 1000), default=10, help="database connections")
    serve.add_argument(
        "--statement-timeout",
        type=float,
        default=30.0,
        help="seconds one call may run in the database (default 30; 0: the server's own setting)",
    )
    serve.add_argument(
        "--max-body-bytes", type=int, default=2 * 1024 * 1024, help="request body limit, else 413 (default 2 MiB)"
    )
    _add_connection_limits(serve, per_owner="requests of one owner at once, else 429")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level",
    )
    serve.add_argument(
        "--metrics-port",
        type=_between(1, 65535),
        default=None,
        help="serve Prometheus /metrics on this port (default: off)",
    )
    serve.add_argument("--metrics-host", default="127.0.0.1", help="bind address of --metrics-port (default 127.0.0.1)")
    serve.add_argument(
        "--trusted-loopback",
        action="store_true",
        help="answer ledger requests (/api/v2) from loopback peers without a token, for the payload's "
        "user_id or --default-user; only on a loopback --host or a --uds socket (docs/SECURITY.md; default: off)",
    )
    serve.add_argument(
        "--default-user",
        default=None,
        help="with --trusted-loopback: the owner of ledger requests whose payload names none (default: none)",
    )

    token = add("token", "Create or revoke HTTP bearer tokens.", lambda a, c: _usage(token))
    token_sub = token.add_subparsers(dest="token_command", metavar="ACTION")
    create = token_sub.add_parser("create", help="print a new token for one owner, once")
    create.set_defaults(handler=cmd_token_create)
    add_dsn(create)
    create.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    _add_user(create, help_text="the owner (user_id) the token acts for")
    create.add_argument("--label", default="", help="a note to recognise the token by (default: none)")
    _flag_names(create, label="--label")
    revoke = token_sub.add_parser(
        "revoke",
        help="revoke a token read from stdin (or --token-file), or by --user and --id",
        description="Revoke a bearer token. The token is read from stdin (asked for without echo on a "
        "terminal) or from --token-file, never from the command line, where ps and the shell's history "
        "would show it; or name it by its owner and id (its sha256, printed by token create).",
    )
    revoke.set_defaults(handler=cmd_token_revoke)
    add_dsn(revoke)
    revoke.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    revoke.add_argument("token", nargs="?", default=None, help=argparse.SUPPRESS)
    revoke.add_argument(
        "--token-file", default=None, metavar="FILE", help="read the token from FILE ('-': stdin; default: stdin)"
    )
    revoke.add_argument("--user", default=None, help="with --id: the token's owner (user_id; default: none)")
    revoke.add_argument(
        "--id", dest="token_id", default=None, metavar="ID", help="the token's id (its sha256 hex; default: none)"
    )

    worker = add("worker", "Run the operations executor until SIGTERM.", cmd_worker)
    add_dsn(worker)
    worker.add_argument("--worker", default=None, help="name shown in receipts (default host:pid)")
    worker.add_argument("--batch", type=_between(1, 1000), default=100, help="operations per transaction (1..1000)")
    worker.add_argument("--until-idle", action="store_true", help="exit when there is nothing left to do")
    worker.add_argument(
        "--shard",
        dest="shards",
        action="append",
        metavar="DSN",
        help="run an executor on this shard instead of --dsn (repeatable; default: none)",
    )
    worker.add_argument(
        "--cluster",
        default=None,
        metavar="PROXY_DSN",
        help="run an executor on every shard of this proxy's cluster definition (default: none)",
    )

    remember = add("add", "Add a memory of one owner (on a pack or a database).", cmd_add)
    add_dsn(remember)
    remember.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    remember.add_argument("content", help="the memory, one self-contained statement")
    _add_user(remember)
    remember.add_argument("--scope", default="personal", help="which part of the owner's life it belongs to")
    remember.add_argument("--kind", default="fact", help="what sort of memory it is")
    remember.add_argument(
        "--evidence",
        default=None,
        help="the user's own words, stored as its evidence and confirming it (default: none)",
    )
    _flag_names(remember, content="CONTENT")

    recall = add("recall", "Find the memories of one owner that match a query, best first.", cmd_recall)
    add_dsn(recall)
    recall.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    recall.add_argument("query", help="words to look for (blank: rank every memory by strength)")
    _add_user(recall)
    recall.add_argument("--scope", action="append", help="only this scope (repeatable; default all)")
    recall.add_argument("--limit", type=int, default=10, help="at most this many (1..1000, default 10)")
    _flag_names(recall, max_count="--limit", scopes="--scope", query="QUERY")

    embed = add("embed", "Give every memory without a vector one, by the configured embedder.", cmd_embed)
    add_dsn(embed)
    embed.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    embed.add_argument(
        "--batch", type=_between(1, 10000), default=500, help="memories per batch (1..10000, default 500)"
    )
    embed.add_argument(
        "--retry-failed", action="store_true", help="try again the memories whose last attempt failed (default: no)"
    )
    embed.add_argument(
        "--index-min-vectors",
        type=_between(1, 1_000_000_000),
        default=INDEX_MIN_VECTORS,
        help=f"move an owner's vectors into the HNSW index from this many on (PostgreSQL; default {INDEX_MIN_VECTORS})",
    )

    snapshot = add("snapshot", "Publish or show a scope's snapshot generation.", lambda a, c: _usage(snapshot))
    snapshot_sub = snapshot.add_subparsers(dest="snapshot_command", metavar="ACTION")
    publish = snapshot_sub.add_parser("publish", help="publish the current generation of a scope")
    publish.set_defaults(handler=cmd_snapshot_publish)
    add_dsn(publish)
    publish.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    _add_user(publish)
    publish.add_argument("--scope", required=True, help="the scope to publish")
    publish.add_argument("--max-items", type=int, default=100, help="items at most (1..10000, default 100)")
    publish.add_argument("--max-bytes", type=int, default=65536, help="document bytes at most (default 65536)")
    publish.add_argument(
        "--expect",
        default=None,
        help="publish only if this generation id (or 'none') is current; exit 1 otherwise (default: publish anyway)",
    )
    _flag_names(
        publish, scope="--scope", max_items="--max-items", max_bytes="--max-bytes", expected_generation_id="--expect"
    )
    show = snapshot_sub.add_parser("show", help="show the current generation of a scope")
    show.set_defaults(handler=cmd_snapshot_show)
    add_dsn(show)
    show.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    _add_user(show)
    show.add_argument("--scope", required=True, help="the scope to show")
    _flag_names(show, scope="--scope")

    maintain = add(
        "maintain",
        "Propose maintenance as a patch for review (default), report only, or apply the safe ops.",
        cmd_maintain,
    )
    add_dsn(maintain)
    maintain.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    _add_user(maintain)
    maintain.add_argument("--report", action="store_true", help="only show the recommendations; change nothing")
    maintain.add_argument(
        "--mode",
        choices=["review", "auto"],
        default="review",
        help="review: write the patch for review (default); auto: also apply decay ops and stability increases "
        "that need no review",
    )

    hook = add("hook", "Store one learning record from a JSON document on stdin (an agent's stop hook).", cmd_hook)
    hook.add_argument("--pack", default="./memories", help="memory pack folder (default ./memories)")
    _add_user(hook, required=False, help_text="the owner, when the document does not name one (default: none)")

    enqueue = add(
        "enqueue", "Store an operation in a memory pack's outbox for sync to deliver; print its id.", cmd_enqueue
    )
    enqueue.add_argument("kind", choices=LEDGER_KINDS, help="the ledger operation kind")
    _add_user(enqueue)
    enqueue.add_argument("--payload", default=None, help="the payload, a JSON object (default: read from stdin)")
    enqueue.add_argument(
        "--depends-on",
        action="append",
        default=[],
        metavar="ID",
        help="an operation this one waits for (repeatable; default: none)",
    )
    enqueue.add_argument(
        "--operation-id", default=None, help="a stable id of your own (makes enqueue idempotent; default a UUIDv7)"
    )
    enqueue.add_argument("--pack", default="./memories", help="memory pack folder (default ./memories)")
    enqueue.add_argument("--json", action="store_true", help="print the stored record as JSON")
    _flag_names(enqueue, operation_id="--operation-id", dependencies="--depends-on", kind="KIND")

    sync = add("sync", "Deliver a memory pack's outbox to the PostgreSQL ledger and follow the receipts.", cmd_sync)
    add_dsn(sync)
    sync.add_argument("--pack", default="./memories", help="memory pack folder (default ./memories)")
    sync.add_argument("--once", action="store_true", help="run one cycle and exit (1 if the ledger is unavailable)")
    sync.add_argument(
        "--batch", type=_between(1, 1000), default=100, help="records per submit transaction (1..1000, default 100)"
    )
    sync.add_argument(
        "--poll-interval", type=float, default=1.0, help="seconds between cycles that found nothing (default 1)"
    )
    sync.add_argument(
        "--extractor",
        default="builtin",
        help="learning extractor (entry point group prme_pg.extractors; default builtin)",
    )
    sync.add_argument(
        "--stale-after",
        type=float,
        default=600.0,
        help="seconds after which a learning record left in processing is reclaimed (default 600)",
    )
    sync.add_argument(
        "--metrics-textfile",
        default=None,
        metavar="PATH",
        help="write the queue depths there for node_exporter's textfile collector (a .prom file; default: none)",
    )
    sync.add_argument("--metrics-interval", type=float, default=15.0, help="seconds between writes (default 15)")

    queue = add("queue", "Show the learning queue and the outbox of a memory pack.", lambda a, c: _usage(queue))
    queue_sub = queue.add_subparsers(dest="queue_command", metavar="ACTION")
    queue_status = queue_sub.add_parser("status", help="records per state and the oldest record per state")
    queue_status.set_defaults(handler=cmd_queue_status)
    queue_status.add_argument("--pack", default="./memories", help="memory pack folder (default ./memories)")
    queue_status.add_argument(
        "--rejected", action="store_true", help="list the rejected records with their reasons instead of counts"
    )
    queue_status.add_argument("--json", action="store_true", help="print one JSON document")

    curate = add("curate", "Show a maintenance patch, or apply the ops you selected from it.", cmd_curate)
    add_dsn(curate)
    curate.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    curate.add_argument("patch_id", help="the patch id printed by prme-pg maintain")
    _add_user(curate)
    curate.add_argument(
        "--select",
        default=None,
        help="comma-separated op ids to apply (e.g. op_001,op_003); omit to show the patch (default: show it)",
    )
    _flag_names(curate, patch_id="PATCH_ID", op_ids="--select")

    mcp = add("mcp", "Serve memory to agents over the Model Context Protocol (needs the mcp extra).", cmd_mcp)
    mcp.add_argument("--dsn", default=None, help="PostgreSQL URL (default: $PRME_DSN, then $DATABASE_URL)")
    mcp.add_argument("--pack", default=None, help="memory pack folder (instead of --dsn; default: none)")
    _add_user(mcp, required=False, help_text="the owner the server acts for (HTTP: default the token's owner)")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="stdio (default) or http")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    mcp.add_argument("--pool-size", type=int, default=4, help="database connections (default 4)")
    _add_connection_limits(mcp, per_owner="tool calls of one owner at once, else a 429 tool error")
    mcp.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"], help="log level"
    )

    schedule = add(
        "schedule",
        "Print (or with --apply install) pg_cron jobs for the executor, the vector index and nightly auto maintenance.",
        cmd_schedule,
    )
    add_dsn(schedule)
    schedule.add_argument("--apply", action="store_true", help="install the jobs through pg_cron on --dsn's server")
    schedule.add_argument("--remove", action="store_true", help="remove the jobs instead")
    schedule.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        help="an owner for nightly maintenance (repeatable; default: none)",
    )
    schedule.add_argument("--database", default=None, help="the database prme lives in (default: --dsn's)")
    schedule.add_argument("--cron-dsn", default=None, help="pg_cron's database (default: cron.database_name)")
    schedule.add_argument("--run-as", default=None, help="the role the jobs run as (default: the installing role)")
    schedule.add_argument(
        "--executor-schedule", default="* * * * *", help="cron expression (default every minute, UTC)"
    )
    schedule.add_argument("--batch", type=int, default=1000, help="operations per executor run (1..1000)")
    schedule.add_argument(
        "--index-schedule", default="*/5 * * * *", help="cron expression of the vector index job (default every 5 min)"
    )
    schedule.add_argument(
        "--index-min-vectors",
        type=int,
        default=INDEX_MIN_VECTORS,
        help=f"move an owner's vectors into the HNSW index from this many on (default {INDEX_MIN_VECTORS})",
    )
    schedule.add_argument(
        "--maintenance-schedule", default="17 3 * * *", help="cron expression (default 03:17 UTC daily)"
    )
    schedule.add_argument("--maintenance-job", default="prme-maintenance", help="job name of this owner set")
    shard = add("shard", "Run prme on several servers behind a PL/Proxy database.", lambda a, c: _usage(shard))
    shard_sub = shard.add_subparsers(dest="shard_command", metavar="ACTION")
    shard_actions = {
        "init": ("write the cluster definition (partitions -> shards) into the proxy database", cmd_shard_init),
        "generate": ("write the proxy functions generated from a shard's catalog", cmd_shard_generate),
        "migrate": ("migrate every shard, then install the proxy functions generated from them", cmd_shard_migrate),
        "status": ("each shard's migrations, readiness and ledger backlog; a down shard as down", cmd_shard_status),
        "locate": ("the partition and shard that hold an owner", cmd_shard_locate),
        "move": ("move an owner to another shard; its event stream goes on without gap", cmd_shard_move),
    }
    for action, (help_text, handler) in shard_actions.items():
        command = shard_sub.add_parser(action, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        add_dsn(command)
    shard_sub.choices["init"].add_argument(
        "--shard",
        dest="shards",
        action="append",
        required=True,
        metavar="DSN",
        help="a shard's connection string as the proxy reaches it (repeatable, in order)",
    )
    shard_sub.choices["init"].add_argument(
        "--partitions", type=int, default=16, help="logical partitions, a power of two (default 16)"
    )
    shard_sub.choices["generate"].add_argument(
        "--output", default="-", metavar="FILE", help="where to write the script (default: standard output)"
    )
    _add_user(shard_sub.choices["locate"])
    _add_user(shard_sub.choices["move"])
    shard_sub.choices["move"].add_argument(
        "--to", required=True, metavar="SHARD", help="the target shard's connection string, as shard status shows it"
    )
    journal = add("journal", "Verify a journal, or anchor its head outside the database.", lambda a, c: _usage(journal))
    journal_sub = journal.add_subparsers(dest="journal_command", metavar="ACTION")
    journal_actions = {
        "head": (
            "verify the journal, then write its head (record count, each chain's newest checksum)",
            cmd_journal_head,
        ),
        "verify": ("check the journal (engine and independent); with --against, against a head", cmd_journal_verify),
    }
    for action, (help_text, handler) in journal_actions.items():
        command = journal_sub.add_parser(action, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        where = command.add_mutually_exclusive_group()
        where.add_argument(
            "--dsn", default=_default_dsn(), help="PostgreSQL URL (default: $PRME_DSN, then $DATABASE_URL)"
        )
        where.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
        _add_user(command)
        command.add_argument("--json", action="store_true", help="print one JSON document")
    journal_sub.choices["head"].add_argument(
        "--output",
        default=None,
        metavar="FILE",
        help="write the head to FILE, never overwritten (default: not written)",
    )
    journal_sub.choices["verify"].add_argument(
        "--against", default=None, metavar="FILE", help="a head written by prme-pg journal head (default: none)"
    )
    for name, help_text, handler in (
        ("import", "Import memories from JSON Lines (prme's own, LangGraph store items, mem0 exports).", cmd_import),
        ("export", "Export one owner's memories as JSON Lines, each with its state and journal.", cmd_export),
    ):
        command = add(name, help_text, handler)
        add_dsn(command)
        command.add_argument("--pack", default=None, help="a memory pack folder instead of a database (default: none)")
    bulk_import, bulk_export = sub.choices["import"], sub.choices["export"]
    bulk_import.add_argument("file", metavar="FILE", help="a JSON Lines file, or - for standard input")
    _add_user(bulk_import, required=False, help_text="the owner of lines without a user_id (default: none)")
    bulk_import.add_argument(
        "--format", choices=["prme", "langgraph", "mem0"], default="prme", help="what each line is (docs/IMPORT.md)"
    )
    bulk_import.add_argument(
        "--skip-invalid", action="store_true", help="report a bad line and go on, instead of stopping at it"
    )
    bulk_import.add_argument(
        "--batch-size", type=_between(1, 1000), default=1000, help="memories per transaction (1 to 1000)"
    )
    _add_user(bulk_export)
    bulk_export.add_argument(
        "--output", default="-", metavar="FILE", help="write to FILE, never overwritten (default: standard output)"
    )
    bulk_export.add_argument(
        "--include-archived", action="store_true", help="archived memories too (an import makes them active)"
    )
    bulk_export.add_argument("--no-journal", action="store_true", help="leave each memory's journal out")
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    console = Console(stderr=False)
    console.soft_wrap = not console.is_terminal  # piped: plain lines, never wrapped at 80 columns
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.handler(args, console))
    except (Exception, KeyboardInterrupt) as exc:
        return _fail(exc, args)


if __name__ == "__main__":
    sys.exit(main())
