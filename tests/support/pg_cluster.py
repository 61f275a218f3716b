"""PostgreSQL clusters of a test's own: a primary and a streaming standby on free loopback ports,
made with ``initdb`` and ``pg_basebackup``, run as the ``postgres`` user (the server refuses
root), killed with ``kill -9`` and promoted with ``pg_ctl promote``. Every directory is under a
temporary directory removed at the end; the shared server on 5432 is never touched."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")
STANDBY_NAME = "standby1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_postgres(*argv: str, timeout: float = 60) -> str:
    done = subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return done.stdout


class Link:
    """A TCP forwarder on a free loopback port to ``target``: the standby streams the primary's
    WAL through it, and ``cut()`` drops every connection and refuses new ones (a network
    partition between the two)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._cut.is_set():
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                return
            upstream.settimeout(None)
            self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self._cut.is_set() and (data := source.recv(65536)):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._cut.set()
        for sock in (self._listener, *self._open):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Node:
    """One server: its data directory, port and log."""

    def __init__(self, root: Path, name: str) -> None:
        self.data = root / name
        self.port = _free_port()
        self.log = root / f"{name}.log"

    def start(self) -> None:
        _as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1",
            "start",
        )

    def pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """``kill -9`` of the postmaster and its backends (a machine that died)."""
        pid = self.pid()
        if pid is None:
            return
        subprocess.run(["pkill", "-9", "-P", str(pid)], check=False)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def promote(self) -> None:
        """Make the standby the primary, and let it commit alone: it was made from the
        primary's configuration, whose ``synchronous_standby_names`` names itself, and a
        primary waiting for a standby that does not exist never commits (what Patroni's
        synchronous mode does when no synchronous standby is left)."""
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-w", "promote")
        self.sql("ALTER SYSTEM SET synchronous_standby_names = ''")
        self.sql("SELECT pg_reload_conf()")

    def sql(self, statement: str) -> str:
        return _as_postgres(
            str(BIN / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-Atc",
            statement,
        ).strip()

    def stop(self) -> None:
        if self.pid() is not None and (self.data / "postmaster.pid").exists():
            subprocess.run(
                [
                    "runuser",
                    "-u",
                    "postgres",
                    "--",
                    str(BIN / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )


@contextmanager
def primary_and_standby(*, synchronous: bool) -> Iterator[tuple[Node, Node, Link]]:
    """A primary and a standby streaming from it through a ``Link``, the standby synchronous
    (``synchronous_commit`` waits for it) or not; both stopped and removed at the end."""
    if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
        message = "PostgreSQL 15's server binaries or runuser are not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="ik-pg-cluster-"))
    shutil.chown(root, "postgres", "postgres")
    primary, standby = Node(root, "primary"), Node(root, "standby")
    try:
        _as_postgres(
            str(BIN / "initdb"),
            "-D",
            str(primary.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        )
        settings = [
            "wal_level = replica",
            "max_wal_senders = 5",
            "max_connections = 200",
            "fsync = on",
            "synchronous_commit = on",
            f"synchronous_standby_names = '{STANDBY_NAME if synchronous else ''}'",
        ]
        with open(primary.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n".join(settings) + "\n")
        primary.start()
        _as_postgres(
            str(BIN / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(standby.data),
            "-X",
            "stream",
            "-R",
        )
        link = Link(primary.port)
        with open(standby.data / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={link.port} user=postgres"
                f" application_name={STANDBY_NAME}'\n"
            )
        standby.start()
        _wait_streaming(primary, synchronous)
        yield primary, standby, link
    finally:
        if "link" in locals():
            link.cut()
        for node in (primary, standby):
            node.stop()
            node.kill()
        shutil.rmtree(root, ignore_errors=True)


def _wait_streaming(primary: Node, synchronous: bool) -> None:
    wanted = "sync" if synchronous else "async"
    query = "SELECT sync_state FROM pg_stat_replication"
    deadline = time.monotonic() + 30
    while True:
        state = _as_postgres(
            str(BIN / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-Atc",
            query,
        ).strip()
        if state == wanted:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby is not streaming ({state!r})")
        time.sleep(0.1)


def failover_url(primary: Node, standby: Node, schema: str) -> str:
    """A store URL naming both servers: the driver connects to whichever is read-write."""
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write&schema={schema}"
