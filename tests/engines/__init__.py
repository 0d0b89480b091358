"""Private Redis and PostgreSQL servers for tests: started on free ports in temporary
directories, stopped by their PID.

``make test`` installs ``redis-server`` and ``postgresql`` from Debian's packages when they are
missing (``make engines``). A test that needs an engine and cannot get one fails with
:class:`EngineMissing`'s message, never skips. PostgreSQL refuses to run as root: as root the
server runs as the ``postgres`` user the Debian package creates (or ``nobody``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

_START_TIMEOUT = 30.0


class EngineMissing(AssertionError):
    """An engine a test needs is not installed (run ``make engines``)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(what: str, ready: object, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while not ready():  # type: ignore[operator]
        if process.poll() is not None:
            raise AssertionError(f"{what} exited at start:\n{log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not start in {_START_TIMEOUT:.0f} s")
        time.sleep(0.05)
    if process.poll() is not None:  # what answered on the port was another engine
        raise AssertionError(f"{what} exited at start:\n{log.read_text(errors='replace')}")


_BIND_ATTEMPTS = 5
"""Starts on fresh ports when a port picked free was taken before the engine bound it (another
xdist worker's engine, or a client's ephemeral port: :func:`free_port` cannot reserve it)."""


def _start_on_free_ports(start: Callable[[], None], repick: Callable[[], None]) -> None:
    """``start()``; while it fails because a port is already in use, ``repick()`` and retry."""
    for attempt in range(_BIND_ATTEMPTS):
        try:
            start()
            return
        except AssertionError as error:
            if "Address already in use" not in str(error) or attempt == _BIND_ATTEMPTS - 1:
                raise
            repick()


def _stop(process: subprocess.Popen | None, sig: int) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def redis_command(port: int, *args: str) -> bytes:
    """Send one command to the Redis on ``port`` and return its raw reply."""
    encoded = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encoded)
        return sock.recv(1 << 20)


class RedisServer:
    """A ``redis-server`` of its own (no persistence) on :attr:`port`; with ``tls``, that port
    speaks TLS only (a self-signed certificate for 127.0.0.1, :attr:`certificate`); with
    ``unix_socket``, it also listens on :attr:`socket`; with ``cluster``, it is a node of a
    Redis Cluster (:class:`RedisCluster`), its bus on :attr:`bus_port`."""

    def __init__(
        self,
        *,
        tls: bool = False,
        unix_socket: bool = False,
        cluster: bool = False,
        node_timeout_ms: int | None = None,
    ) -> None:
        self.node_timeout_ms = node_timeout_ms
        binary = shutil.which("redis-server")
        if binary is None:
            raise EngineMissing(
                "redis-server is not installed: run `make engines` (apt-get install redis-server)"
            )
        self._binary = binary
        self.directory = Path(tempfile.mkdtemp(prefix="crossway-redis-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.tls = tls
        self.certificate = self.directory / "cert.pem"
        self.socket = self.directory / "redis.sock" if unix_socket else None
        self.bus_port = free_port() if cluster else None
        if tls:
            self._make_certificate()

    def _listen(self) -> list[str]:
        """The listening arguments for :attr:`port` (and the cluster bus's)."""
        listen = ["--port", str(self.port)]
        if self.tls:
            listen = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(self.certificate),
                "--tls-key-file",
                str(self.directory / "key.pem"),
                "--tls-ca-cert-file",
                str(self.certificate),
                "--tls-auth-clients",
                "no",
            ]
        if self.socket is not None:
            listen += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        if self.bus_port is not None:
            listen += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(self.directory / "nodes.conf"),
                "--cluster-port",
                str(self.bus_port),
            ]
            if self.node_timeout_ms is not None:
                listen += ["--cluster-node-timeout", str(self.node_timeout_ms)]
        return listen

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def _make_certificate(self) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise EngineMissing("openssl is not installed: apt-get install openssl")
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(self.directory / "key.pem"),
                "-out",
                str(self.certificate),
            ],
            check=True,
            capture_output=True,
        )

    def start(self) -> RedisServer:
        """Start (or restart, on the same port) and wait until it accepts connections; a first
        start whose port was taken meanwhile moves to fresh ports."""
        if self.process is not None:
            self._launch()
        else:
            _start_on_free_ports(self._launch, self._repick)
        return self

    def _repick(self) -> None:
        self.port = free_port()
        if self.bus_port is not None:
            self.bus_port = free_port()

    def _launch(self) -> None:
        log = self.directory / "redis.log"
        with log.open("ab") as sink:
            self.process = subprocess.Popen(
                [
                    self._binary,
                    *self._listen(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.directory),
                    "--daemonize",
                    "no",
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        _wait("redis-server", lambda: _accepts(self.port), self.process, log)

    def kill(self) -> None:
        """Stop it at once (SIGKILL: an outage, not a shutdown)."""
        _stop(self.process, signal.SIGKILL)

    def stop(self) -> None:
        """Stop it and remove its directory."""
        _stop(self.process, signal.SIGTERM)
        shutil.rmtree(self.directory, ignore_errors=True)


class RedisCluster:
    """``size`` primaries (:class:`RedisServer`), the 16384 slots split evenly between them, each
    with ``replicas`` replicas, every node knowing every other; :attr:`url` names the first
    primary, :attr:`urls` every primary. ``node_timeout_ms`` is ``cluster-node-timeout`` (how long
    a silent primary takes to be failed over by its replica); Redis's own default when None."""

    def __init__(
        self, size: int = 3, *, replicas: int = 0, node_timeout_ms: int | None = None
    ) -> None:
        self.primaries = [
            RedisServer(cluster=True, node_timeout_ms=node_timeout_ms) for _ in range(size)
        ]
        self.replicas = [
            RedisServer(cluster=True, node_timeout_ms=node_timeout_ms)
            for _ in range(size * replicas)
        ]
        self.nodes = [*self.primaries, *self.replicas]

    @property
    def url(self) -> str:
        return self.primaries[0].url

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.primaries]

    def start(self) -> RedisCluster:
        """Start the nodes, give each primary its slots, introduce them, attach each replica to
        its primary; wait until the cluster is ok on every node and every replica in sync."""
        for node in self.nodes:
            node.start()
        size = len(self.primaries)
        bounds = [round(i * 16384 / size) for i in range(size + 1)]
        first = self.primaries[0]
        for node, start, end in zip(self.primaries, bounds, bounds[1:], strict=False):
            slots = ("CLUSTER", "ADDSLOTSRANGE", str(start), str(end - 1))
            assert redis_command(node.port, *slots).startswith(b"+OK")
        for node in self.nodes[1:]:
            meet = ("CLUSTER", "MEET", "127.0.0.1", str(first.port), str(first.bus_port))
            assert redis_command(node.port, *meet).startswith(b"+OK")
        self._wait("the Redis Cluster did not form", lambda: all(map(self._known, self.nodes)))
        for index, replica in enumerate(self.replicas):
            primary = self.primaries[index % size]
            attach = ("CLUSTER", "REPLICATE", self.node_id(primary))
            self._wait(
                "a replica could not attach",
                lambda replica=replica, attach=attach: redis_command(
                    replica.port, *attach
                ).startswith(b"+OK"),
            )
        self._wait("the Redis Cluster is not ok", lambda: all(map(self._ready, self.nodes)))
        return self

    def _wait(self, failure: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{failure} in {_START_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def _info(self, node: RedisServer, *section: str) -> str:
        return redis_command(node.port, *section).decode(errors="replace")

    def _known(self, node: RedisServer) -> bool:
        return f"cluster_known_nodes:{len(self.nodes)}" in self._info(node, "CLUSTER", "INFO")

    def _ready(self, node: RedisServer) -> bool:
        if "cluster_state:ok" not in self._info(node, "CLUSTER", "INFO"):
            return False
        if node in self.replicas:
            return "master_link_status:up" in self._info(node, "INFO", "replication")
        return True

    def node_id(self, node: RedisServer) -> str:
        """The node's cluster id."""
        return redis_command(node.port, "CLUSTER", "MYID").split(b"\r\n")[1].decode()

    def serving(self, slot: int) -> RedisServer:
        """The node that serves ``slot`` now, as a live node's ``CLUSTER NODES`` says (after a
        failover, the promoted replica)."""
        node = self._serving(slot)
        if node is None:
            raise AssertionError(f"no live node serves slot {slot}")
        return node

    def _serving(self, slot: int) -> RedisServer | None:
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            for line in self._info(node, "CLUSTER", "NODES").splitlines():
                fields = line.split()
                if len(fields) < 9 or "master" not in fields[2] or "fail" in fields[2]:
                    continue
                for span in fields[8:]:
                    first, _, last = span.partition("-")
                    if first.isdigit() and int(first) <= slot <= int(last or first):
                        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                        return next(n for n in self.nodes if n.port == port)
            break
        return None

    def fail_over(self, primary: RedisServer) -> RedisServer:
        """Kill ``primary`` (SIGKILL) and wait until one of its replicas serves its slots and
        every live node says the cluster is ok; returns the promoted replica."""
        slot = self._first_slot(primary)
        primary.kill()
        live = [node for node in self.nodes if node is not primary]
        self._wait(
            "no replica took over",
            lambda: (
                all("cluster_state:ok" in self._info(node, "CLUSTER", "INFO") for node in live)
                and self._serving(slot) not in (None, primary)
            ),
        )
        return self.serving(slot)

    def _first_slot(self, primary: RedisServer) -> int:
        for line in self._info(primary, "CLUSTER", "NODES").splitlines():
            if "myself" in line:
                first = line.split()[8].partition("-")[0]
                return int(first)
        raise AssertionError("the node serves no slot")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _postgres_binaries() -> Path:
    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin"):
        for directory in sorted(glob.glob(pattern), reverse=True):
            if (Path(directory) / "postgres").exists() and (Path(directory) / "initdb").exists():
                return Path(directory)
    found = shutil.which("postgres")
    if found and shutil.which("initdb"):
        return Path(found).parent
    raise EngineMissing(
        "PostgreSQL is not installed: run `make engines` (apt-get install postgresql)"
    )


class PostgresServer:
    """A PostgreSQL cluster of its own on :attr:`port`, with a ``crossway`` database owned by
    the user ``crossway`` (password ``crossway``)."""

    def __init__(self) -> None:
        self._bin = _postgres_binaries()
        self.directory = Path(tempfile.mkdtemp(prefix="crossway-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    self._user = pwd.getpwnam(name)
                    break
            if self._user is None:
                raise EngineMissing("no unprivileged user to run PostgreSQL as")
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self._initdb()

    @property
    def url(self) -> str:
        return f"postgresql://crossway:crossway@127.0.0.1:{self.port}/crossway"

    def _run_as(self) -> dict:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        password = self.directory / "password"
        password.write_text("crossway\n")
        if self._user is not None:
            os.chown(password, self._user.pw_uid, self._user.pw_gid)
        subprocess.run(
            [
                str(self._bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "crossway",
                "--pwfile",
                str(password),
                "-A",
                "scram-sha-256",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            cwd=self.directory,
            **self._run_as(),
        )

    def start(self) -> PostgresServer:
        """Start (or restart, on the same port and data) and wait until it accepts connections;
        the first start creates the ``crossway`` database (and moves to a fresh port if its port
        was taken meanwhile)."""
        if self.process is not None:
            self._launch()
        else:
            _start_on_free_ports(self._launch, self._repick)
        return self

    def _repick(self) -> None:
        self.port = free_port()

    def _launch(self) -> None:
        log = self.directory / "postgres.log"
        with log.open("ab") as sink:
            if self._user is not None:
                os.chown(log, self._user.pw_uid, self._user.pw_gid)
            self.process = subprocess.Popen(
                [
                    str(self._bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(self.directory),
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                **self._run_as(),
            )
        _wait("postgres", self._ready, self.process, log)

    def _ready(self) -> bool:
        if not _accepts(self.port):
            return False
        result = subprocess.run(
            [
                str(self._bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "crossway",
                "-d",
                "postgres",
                "-tAc",
                "SELECT 1 FROM pg_database WHERE datname = 'crossway'",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PGPASSWORD": "crossway"},
            check=False,
        )
        if result.returncode != 0:
            return False
        if result.stdout.strip() != "1":
            self.sql("CREATE DATABASE crossway", database="postgres")
        return True

    def sql(self, statement: str, database: str = "crossway") -> str:
        """Run one statement with psql; its output (tuples only, unaligned)."""
        result = subprocess.run(
            [
                str(self._bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "crossway",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-tAc",
                statement,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PGPASSWORD": "crossway"},
            check=True,
        )
        return result.stdout.strip()

    def kill(self) -> None:
        """Stop it at once by its PID (SIGQUIT, PostgreSQL's immediate shutdown: connections
        cut, no checkpoint; the next :meth:`start` recovers from the WAL): an outage."""
        _stop(self.process, signal.SIGQUIT)

    def stop(self, *, remove: bool = False) -> None:
        """Stop it (fast shutdown) by its PID; ``remove`` deletes its data too."""
        _stop(self.process, signal.SIGINT)
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)
