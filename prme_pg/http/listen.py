"""The listening socket of ``prme-pg serve`` and ``prme-pg mcp``, bound before anything is announced.

uvicorn binds inside its own startup: a busy port is logged and ends the process (exit 3)
after the command has already printed "serving ... on http://...", and a unix socket is
chmod'ed to 0o666 after binding, whatever the umask (any local user could connect). So the
commands bind here first, fail in one line (an :class:`OSError`, which the CLI prints as
one line, exit 1) and hand the bound socket to uvicorn (``Server.serve(sockets=[...])``),
which then neither binds nor changes the socket's mode.

A unix socket is bound under a umask of 0o177 (no window in which it is wider than 0600)
and then given ``mode`` (default 0600: the server's own user alone; 0660 lets a group in);
the server refuses to start if the file does not end with exactly that mode. A mode with
any bit for "other" users is refused: it would let every local user act for every owner
in trusted loopback mode (docs/SECURITY.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

__all__ = ["DEFAULT_UDS_MODE", "ListenError", "listen_tcp", "listen_unix", "parse_mode"]


class ListenError(OSError):
    """The server cannot listen where it was told to: its message is one line, without ``[Errno N]``."""

    def __str__(self) -> str:
        return str(self.strerror)


#: The unix socket's mode unless ``--uds-mode`` says otherwise: the server's user alone.
DEFAULT_UDS_MODE = 0o600


def parse_mode(text: str) -> int:
    """An octal socket mode (``600``, ``0660``); ValueError for anything else or any bit for others."""
    try:
        mode = int(text, 8)
    except ValueError:
        raise ValueError(f"{text!r} is not an octal mode such as 600 or 660") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"{text!r} is not a file mode (000 to 777)")
    if mode & 0o007:
        raise ValueError(f"{text} lets every local user connect; use 600 (this user) or 660 (a group)")
    if mode & 0o600 != 0o600:
        raise ValueError(f"{text} would shut out the server's own user; the owner bits must be rw (6)")
    return mode


def listen_tcp(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (OSError naming it when the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        raise ListenError(exc.errno, f"cannot listen on {where}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def listen_unix(path: str, mode: int = DEFAULT_UDS_MODE, backlog: int = 2048) -> socket.socket:
    """A listening unix socket at ``path`` whose file has exactly ``mode`` (OSError otherwise).

    A stale socket file (nothing listens on it) is replaced; a live one, or any other kind of
    file, is refused.
    """
    if mode & 0o007:
        raise ValueError("a unix socket open to every local user is refused")
    with contextlib.suppress(FileNotFoundError):
        existing = os.lstat(path)
        if not stat.S_ISSOCK(existing.st_mode):
            raise ListenError(errno.EEXIST, f"cannot listen on {path}: it exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            os.unlink(path)  # stale: its server is gone
        else:
            raise ListenError(errno.EADDRINUSE, f"cannot listen on {path}: another server is listening on it")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o177)  # the file is never wider than 0600, not even before the chmod
        try:
            sock.bind(path)
        finally:
            os.umask(previous)
        os.chmod(path, mode)
        actual = stat.S_IMODE(os.lstat(path).st_mode)
        if actual != mode:
            raise ListenError(errno.EPERM, f"cannot give the socket {path} mode {mode:o} (it has {actual:o})")
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        if isinstance(exc, ListenError):
            raise
        raise ListenError(exc.errno, f"cannot listen on {path}: {exc.strerror or exc}") from None
    return sock
