"""Real Apache Kafka (KRaft) brokers as plain JVM processes on 127.0.0.1.

Used by the integration tests (:func:`start_cluster`) and by ``make kafka-up`` /
``make kafka-down`` through the CLI at the bottom::

    python -m devservices.kafka up [--dir var/kafka] [--port 9092] [--brokers 1] [--fresh]
    python -m devservices.kafka status [--dir var/kafka]
    python -m devservices.kafka down [--dir var/kafka]

Every node is a combined broker+controller, so a 3-node cluster is also a 3-voter quorum that
keeps working when any one node dies. Layout of a data dir::

    <data_dir>/node-<i>/server.properties   broker config, rewritten on every start
    <data_dir>/node-<i>/log4j.properties
    <data_dir>/node-<i>/data/               log.dirs, including the KRaft metadata log
    <data_dir>/node-<i>/kafka.out           JVM stdout+stderr of the current run
    <data_dir>/node-<i>/server.log          broker log, WARN and up, rolled at 10 MB
    <data_dir>/node-<i>/kafka.pid           pid (= process group id) while it runs
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from core.kafka_admin import create_topic
from core.paths import KAFKA_JARS_DIR, VAR_DIR
from core.processes import StopOnExit, free_ports, pid_alive, read_pid, signal_group, wait_gone
from devservices import _cli as cli

log = logging.getLogger("uatu.kafka")

DEFAULT_JARS_DIR = KAFKA_JARS_DIR
DEFAULT_DATA_DIR = VAR_DIR / "kafka"
HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0
_FORMAT_TIMEOUT_S = 120.0


class KafkaBrokerError(RuntimeError):
    """A broker failed to start, did not answer in time, or refused a request."""


@dataclass
class BrokerNode:
    """One combined broker+controller JVM.

    ``node_id`` equals the node's index in :attr:`KafkaCluster.brokers`. ``process`` is None
    until the node is started from this Python process.
    """

    node_id: int
    port: int
    controller_port: int
    dir: Path
    rack: str | None = None  # broker.rack, the zone probes are tagged with
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log4j_path(self) -> Path:
        return self.dir / "log4j.properties"

    @property
    def data_path(self) -> Path:
        return self.dir / "data"

    @property
    def out_path(self) -> Path:
        return self.dir / "kafka.out"

    @property
    def pid_path(self) -> Path:
        return self.dir / "kafka.pid"

    def is_running(self) -> bool:
        """True while the JVM started by this process has not exited."""
        return self.process is not None and self.process.poll() is None


class KafkaCluster(StopOnExit):
    """Brokers started by :func:`start_cluster`.

    The JVMs are not tied to this object's lifetime: they keep running until :meth:`stop`
    (or the end of a ``with`` block), which is what lets the CLI leave them in the background.
    """

    def __init__(
        self, data_dir: Path, brokers: list[BrokerNode], jars_dir: Path, heap: str
    ) -> None:
        self.data_dir = data_dir
        self.brokers = brokers
        self.jars_dir = jars_dir
        self.heap = heap

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` of every broker, dead or alive."""
        return ",".join(b.address for b in self.brokers)

    def admin(self) -> AdminClient:
        """A new AdminClient on :attr:`bootstrap_servers`.

        Keep a reference while waiting on its futures: once the client is garbage collected
        they fail with ``_DESTROY``.
        """
        # Routing librdkafka's log through `logging` keeps "connection refused" chatter about
        # deliberately killed brokers off stderr.
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": log.getChild("client"),
        }
        return AdminClient(conf)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every running broker, SIGKILL those still alive after ``timeout`` seconds.

        Idempotent; removes the pid files.
        """
        _terminate([b for b in self.brokers if b.is_running()], timeout)
        for broker in self.brokers:
            broker.pid_path.unlink(missing_ok=True)

    def kill_broker(self, i: int) -> None:
        """SIGKILL broker ``i`` (no controlled shutdown) and reap it."""
        broker = self.brokers[i]
        if broker.process is None or not broker.is_running():
            raise KafkaBrokerError(f"broker {i} is not running")
        log.info("killing broker %d (pid %d)", i, broker.process.pid)
        signal_group(broker.process.pid, signal.SIGKILL)
        broker.process.wait()
        broker.pid_path.unlink(missing_ok=True)

    def restart_broker(self, i: int, timeout: float = READY_TIMEOUT_S) -> None:
        """Start broker ``i`` again with its existing config and storage.

        A broker that is still running is stopped gracefully first. Returns once every running
        broker answers with metadata listing all of them, broker ``i`` included: a broker lists
        itself only once the controller has unfenced it, and the others learn of it a moment
        later, so a client may reach any of them right after this returns.
        """
        broker = self.brokers[i]
        if broker.is_running():
            _terminate([broker], STOP_TIMEOUT_S)
        log.info("restarting broker %d on %s", i, broker.address)
        started = time.monotonic()
        _launch(broker, self.jars_dir, self.heap)
        running = [b for b in self.brokers if b.is_running()]
        _wait_ready(running, {b.node_id for b in running}, timeout, started)

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int | None = None,
        config: dict[str, str] | None = None,
        timeout: float = 30.0,
        replica_assignment: list[list[int]] | None = None,
    ) -> None:
        """Create a topic and return once every partition has a leader.

        ``replication_factor=None`` uses the broker's ``default.replication.factor``;
        ``replica_assignment`` (one broker list per partition) replaces it.
        Raises :class:`KafkaBrokerError` if creation fails or leaders do not appear in time.
        """
        admin = self.admin()
        placement: dict[str, Any] = (
            {"replica_assignment": replica_assignment}
            if replica_assignment is not None
            # -1 asks the broker for its default (KIP-464).
            else {"replication_factor": -1 if replication_factor is None else replication_factor}
        )
        topic = NewTopic(
            name,
            num_partitions=partitions,
            config={k: str(v) for k, v in (config or {}).items()},
            **placement,
        )
        try:
            create_topic(admin, topic, timeout_s=timeout)
        except KafkaException as e:
            raise KafkaBrokerError(f"creating topic {name!r} failed: {e}") from e

        # Ask every running broker: each learns about the topic from the metadata log on its
        # own schedule, and a client bootstrapped on a laggard would see no such topic.
        deadline = time.monotonic() + timeout
        pending = [b for b in self.brokers if b.is_running()]
        while True:
            pending = [b for b in pending if not _topic_ready(b.address, name, partitions)]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(
                    f"topic {name!r}: brokers {[b.node_id for b in pending]} still see partitions "
                    f"without a leader after {timeout} s"
                )
            time.sleep(_POLL_INTERVAL_S)


def start_cluster(
    data_dir: Path,
    n_brokers: int = 1,
    base_port: int | None = None,
    jars_dir: Path = DEFAULT_JARS_DIR,
    heap: str = "512m",
    timeout: float = READY_TIMEOUT_S,
    racks: Sequence[str] | None = None,
) -> KafkaCluster:
    """Start ``n_brokers`` combined broker+controller nodes under ``data_dir`` and wait for them.

    ``racks`` gives each node its ``broker.rack`` (one per broker), None none.

    Broker ports are ``base_port``, ``base_port + 1``, ... or free ports when ``base_port`` is
    None; controller ports are always free ports. A data dir that already holds a cluster is
    reused (same cluster id, controller ports and, without ``base_port``, broker ports); its
    broker count must match. Returns once every broker lists all ``n_brokers`` brokers in its
    metadata; on failure or after ``timeout`` seconds stops what it started and raises
    :class:`KafkaBrokerError` carrying the tail of the broker's output.
    """
    if n_brokers < 1:
        raise ValueError(f"n_brokers must be >= 1, got {n_brokers}")
    data_dir = data_dir.resolve()
    jars_dir = jars_dir.resolve()
    if not any(jars_dir.glob("kafka_2.*.jar")):
        raise KafkaBrokerError(f"no Kafka broker jar (kafka_2.*.jar) in {jars_dir}")
    live = running_pids(data_dir)
    if live:
        raise KafkaBrokerError(f"brokers from {data_dir} are already running (pids {live})")

    nodes = _plan_nodes(data_dir, n_brokers, base_port)
    if racks is not None:
        if len(racks) != n_brokers:
            raise ValueError(f"racks must name one rack per broker, got {list(racks)}")
        for node, rack in zip(nodes, racks, strict=True):
            node.rack = rack
    for port in [p for n in nodes for p in (n.port, n.controller_port)]:
        if not _port_free(port):
            raise KafkaBrokerError(f"port {HOST}:{port} is already in use")
    cluster_id = _existing_cluster_id(nodes) or _new_cluster_id()
    for node in nodes:
        node.dir.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(_server_properties(node, nodes))
        node.log4j_path.write_text(_log4j_properties(node))
    _format_storage(nodes, cluster_id, jars_dir)

    cluster = KafkaCluster(data_dir, nodes, jars_dir, heap)
    started = time.monotonic()
    try:
        for node in nodes:
            log.info("starting broker %d on %s", node.node_id, node.address)
            _launch(node, jars_dir, heap)
        _wait_ready(nodes, {n.node_id for n in nodes}, timeout, started)
    except BaseException:
        # Half a cluster is worse than none: it holds ports and confuses the next attempt.
        cluster.stop()
        raise
    return cluster


def stop_from_pidfiles(data_dir: Path, timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """Stop brokers that a previous process started in ``data_dir``; return their pids.

    SIGTERM each broker's process group, SIGKILL whatever is left after ``timeout`` seconds,
    then remove the pid files. A pid file whose process is gone, or now belongs to something
    other than this node's broker, is just removed. Safe when nothing runs.
    """
    data_dir = data_dir.resolve()
    pids = running_pids(data_dir)
    for pid in pids:
        log.info("stopping broker pid %d", pid)
        signal_group(pid, signal.SIGTERM)
    survivors = wait_gone(pids, timeout)
    for pid in survivors:
        log.warning("broker pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout)
        signal_group(pid, signal.SIGKILL)
    wait_gone(survivors, 10.0)
    for pid_file in data_dir.glob("node-*/kafka.pid"):
        pid_file.unlink(missing_ok=True)
    return pids


def running_pids(data_dir: Path) -> list[int]:
    """Pids from ``data_dir``'s pid files that are still this data dir's brokers."""
    pids = []
    for pid_file in sorted(data_dir.glob("node-*/kafka.pid")):
        pid = read_pid(pid_file)
        if pid is not None and _is_node_broker(pid, pid_file.parent):
            pids.append(pid)
    return pids


def load_nodes(data_dir: Path) -> list[BrokerNode]:
    """Nodes described by the ``server.properties`` files under ``data_dir``, by node id."""
    nodes = []
    for config in data_dir.glob("node-*/server.properties"):
        props = _read_properties(config)
        if "listeners" not in props or "node.id" not in props:
            raise KafkaBrokerError(f"{config} lacks node.id or listeners; wipe {data_dir}")
        ports = {
            name: int(url.rsplit(":", 1)[1])
            for name, url in (
                listener.split("://", 1) for listener in props["listeners"].split(",")
            )
        }
        nodes.append(
            BrokerNode(
                node_id=int(props["node.id"]),
                port=ports["PLAINTEXT"],
                controller_port=ports["CONTROLLER"],
                dir=config.parent,
            )
        )
    return sorted(nodes, key=lambda n: n.node_id)


def broker_answers(address: str, expected_ids: Iterable[int], timeout: float) -> bool:
    """True if the broker at ``address`` answers metadata listing all ``expected_ids``."""
    # A fresh client per probe: its only known broker is `address`, so the answer comes from
    # that broker and not from another one it learned about. log_level 0 silences the
    # connection-refused noise while the broker is still starting.
    admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return set(expected_ids) <= set(md.brokers)


def _topic_ready(address: str, name: str, partitions: int) -> bool:
    admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
    try:
        meta = admin.list_topics(topic=name, timeout=_PROBE_TIMEOUT_S).topics.get(name)
    except KafkaException:
        return False
    return (
        meta is not None
        and meta.error is None
        and len(meta.partitions) == partitions
        and all(p.leader >= 0 for p in meta.partitions.values())
    )


# --- configuration ---------------------------------------------------------------------------


def _plan_nodes(data_dir: Path, n_brokers: int, base_port: int | None) -> list[BrokerNode]:
    existing = load_nodes(data_dir)
    if existing and len(existing) != n_brokers:
        raise KafkaBrokerError(
            f"{data_dir} holds a {len(existing)}-broker cluster, not {n_brokers}; wipe it first"
        )
    fixed = [] if base_port is None else [base_port + i for i in range(n_brokers)]
    if existing:
        # Controller ports stay as formatted so the quorum keeps its addresses across restarts.
        ports = fixed or [n.port for n in existing]
        controller_ports = [n.controller_port for n in existing]
    else:
        free = free_ports(n_brokers if fixed else 2 * n_brokers, HOST, exclude=fixed)
        ports = fixed or free[n_brokers:]
        controller_ports = free[:n_brokers]
    return [
        BrokerNode(i, ports[i], controller_ports[i], data_dir / f"node-{i}")
        for i in range(n_brokers)
    ]


def _server_properties(node: BrokerNode, nodes: Sequence[BrokerNode]) -> str:
    n = len(nodes)
    replication = min(3, n)
    min_isr = 2 if n >= 3 else 1
    voters = ",".join(f"{b.node_id}@{HOST}:{b.controller_port}" for b in nodes)
    props = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": node.data_path,
        # Sized for a 2-core dev box running up to three of these next to Spark.
        "num.network.threads": 2,
        "num.io.threads": 2,
        "num.partitions": 1,
        "default.replication.factor": replication,
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        # The default (2) would make transactions fail outright on a single broker.
        "transaction.state.log.min.isr": min_isr,
        "min.insync.replicas": min_isr,
        "log.retention.hours": 168,
        "group.initial.rebalance.delay.ms": 0,
        # Tests must create their topics explicitly; a typo should fail, not create a topic.
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
    }
    if node.rack is not None:
        props["broker.rack"] = node.rack
    lines = [f"{k}={_escape(str(v))}" for k, v in props.items()]
    return (
        "# Written by devservices/kafka.py on every start; edits are lost.\n"
        + "\n".join(lines)
        + "\n"
    )


def _log4j_properties(node: BrokerNode) -> str:
    layout = "org.apache.log4j.PatternLayout"
    pattern = "[%d] %p %m (%c)%n"
    return f"""\
# Written by devservices/kafka.py. WARN keeps test logs small; raise it here when debugging.
log4j.rootLogger=WARN, stdout, file
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout={layout}
log4j.appender.stdout.layout.ConversionPattern={pattern}
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File={_escape(str(node.dir / "server.log"))}
log4j.appender.file.MaxFileSize=10MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout={layout}
log4j.appender.file.layout.ConversionPattern={pattern}
# One line per start and stop, so the log shows when the node was up.
log4j.logger.kafka.server.KafkaRaftServer=INFO
"""


def _escape(value: str) -> str:
    # Java .properties treats a backslash as an escape character.
    return value.replace("\\", "\\\\")


def _read_properties(path: Path) -> dict[str, str]:
    props = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip().replace("\\\\", "\\")
    return props


def _new_cluster_id() -> str:
    # Same shape as Kafka's Uuid.randomUuid(): url-safe base64 of 16 random bytes, unpadded,
    # never starting with "-" (it would read as a command-line flag).
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _existing_cluster_id(nodes: Sequence[BrokerNode]) -> str | None:
    for node in nodes:
        meta = node.data_path / "meta.properties"
        if meta.exists():
            return _read_properties(meta).get("cluster.id")
    return None


# --- processes -------------------------------------------------------------------------------


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkaBrokerError("no java on PATH and no usable JAVA_HOME")
    return java


def jvm_command(
    jars_dir: Path, log4j: Path, main: str, *args: str, heap: str | None = None
) -> list[str]:
    """argv running ``main`` on the jars in ``jars_dir``, logging as ``log4j`` says.

    Java comes from ``JAVA_HOME`` or else ``PATH``; ``heap`` (e.g. ``"512m"``) sets both -Xms
    and -Xmx, None leaves the JVM's default. Shared by the other tools that run Kafka's JVMs.
    """
    heap_flags = [f"-Xmx{heap}", f"-Xms{heap}"] if heap else []
    return [
        _java(),
        *heap_flags,
        "-XX:+UseSerialGC",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{log4j}",
        "-cp",
        f"{jars_dir}/*",  # expanded by the JVM, not the shell
        main,
        *args,
    ]


def _format_storage(nodes: Sequence[BrokerNode], cluster_id: str, jars_dir: Path) -> None:
    # The JVMs run in parallel: each spends ~1 s of CPU just starting up.
    procs = []
    for node in nodes:
        if (node.data_path / "meta.properties").exists():
            log.info("storage in %s already formatted", node.data_path)
            continue
        log.info("formatting storage in %s", node.data_path)
        cmd = jvm_command(
            jars_dir,
            node.log4j_path,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(node.config_path),
            "--ignore-formatted",
        )
        procs.append(
            (node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        )
    for node, proc in procs:
        out, _ = proc.communicate(timeout=_FORMAT_TIMEOUT_S)
        if proc.returncode != 0:
            raise KafkaBrokerError(
                f"formatting {node.data_path} failed (exit {proc.returncode}):\n"
                + out.decode(errors="replace")
            )


def _launch(node: BrokerNode, jars_dir: Path, heap: str) -> None:
    cmd = jvm_command(jars_dir, node.log4j_path, "kafka.Kafka", str(node.config_path), heap=heap)
    with node.out_path.open("wb") as out:
        node.process = subprocess.Popen(
            cmd,
            cwd=node.dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own process group: Ctrl-C in the terminal that ran `up` does not reach the
            # broker, and stop() can signal the whole group.
            start_new_session=True,
        )
    node.pid_path.write_text(f"{node.process.pid}\n")


def _wait_ready(
    nodes: Sequence[BrokerNode], expected_ids: set[int], timeout: float, started: float
) -> None:
    """Return once every node lists ``expected_ids`` in its metadata; raise on exit or timeout."""
    deadline = time.monotonic() + timeout
    pending = list(nodes)
    while True:
        for node in list(pending):
            if node.process is None or node.process.poll() is not None:
                code = node.process.returncode if node.process else None
                raise KafkaBrokerError(
                    f"broker {node.node_id} exited with code {code} while starting; "
                    f"tail of {node.out_path}:\n{log_tail(node.out_path)}"
                )
            probe_timeout = min(_PROBE_TIMEOUT_S, max(0.1, deadline - time.monotonic()))
            if broker_answers(node.address, expected_ids, probe_timeout):
                took = time.monotonic() - started
                log.info("broker ready: %s (took %.1f s)", node.address, took)
                pending.remove(node)
        if not pending:
            return
        if time.monotonic() >= deadline:
            node = pending[0]
            raise KafkaBrokerError(
                f"broker(s) {[n.address for n in pending]} did not list brokers "
                f"{sorted(expected_ids)} within {timeout:.0f} s; "
                f"tail of {node.out_path}:\n{log_tail(node.out_path)}"
            )
        time.sleep(_POLL_INTERVAL_S)


def _terminate(nodes: Sequence[BrokerNode], timeout: float) -> None:
    procs = [n.process for n in nodes if n.process is not None]
    # Signal all first and wait after: shutdowns overlap instead of adding up.
    for proc in procs:
        signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("broker pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, timeout)
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


def _is_node_broker(pid: int, node_dir: Path) -> bool:
    # Pids get reused: only trust a pid file if the process is this node's kafka.Kafka.
    if not pid_alive(pid):
        return False
    if not Path("/proc/self").exists():
        return True  # no procfs (macOS): liveness is all we can check
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    config = str(node_dir.resolve() / "server.properties").encode()
    return b"kafka.Kafka" in cmdline and config in cmdline


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Match the JVM, which sets SO_REUSEADDR: a port in TIME_WAIT is usable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, for error messages; never raises."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 16384))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# --- CLI -------------------------------------------------------------------------------------


def _cmd_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    if args.fresh:
        stop_from_pidfiles(data_dir)
        _wipe(data_dir)
    pids = running_pids(data_dir)
    if pids:
        nodes = load_nodes(data_dir)
        ids = [n.node_id for n in nodes]
        bootstrap = ",".join(n.address for n in nodes)
        wanted = [args.port + i for i in range(args.brokers)]
        if [n.port for n in nodes] != wanted:
            # Succeeding here would hand the caller a cluster of another shape than it asked for.
            log.error(
                "brokers from %s already running on %s, not on %s; use --fresh to replace them",
                data_dir,
                bootstrap,
                ",".join(f"{HOST}:{p}" for p in wanted),
            )
            return 1
        if all(broker_answers(n.address, ids, _PROBE_TIMEOUT_S) for n in nodes):
            log.info("brokers from %s already running: %s", data_dir, bootstrap)
            return 0
        log.error(
            "brokers from %s are running (pids %s) but not all answer on %s; "
            "wait and retry, or run `down` first",
            data_dir,
            pids,
            bootstrap,
        )
        return 1
    cluster = start_cluster(
        data_dir,
        n_brokers=args.brokers,
        base_port=args.port,
        jars_dir=args.jars,
        heap=args.heap,
        timeout=args.timeout,
    )
    log.info("kafka up: bootstrap.servers=%s", cluster.bootstrap_servers)
    return 0


def _wipe(data_dir: Path) -> None:
    if not data_dir.exists():
        return
    strangers = [p.name for p in data_dir.iterdir() if not p.name.startswith("node-")]
    if strangers:
        # A mistyped --dir must not cost someone their home directory.
        raise KafkaBrokerError(f"not wiping {data_dir}: it holds more than node dirs {strangers}")
    log.info("wiping %s", data_dir)
    shutil.rmtree(data_dir)


def _cmd_down(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    pids = stop_from_pidfiles(data_dir)
    if pids:
        log.info("stopped %d broker(s) from %s", len(pids), data_dir)
    else:
        log.info("no brokers running from %s", data_dir)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    """Print one line per node; exit 0 only if every node runs and answers."""
    data_dir: Path = args.dir.resolve()
    nodes = load_nodes(data_dir)
    if not nodes:
        print(f"no brokers configured in {data_dir}")
        return 1
    ids = [n.node_id for n in nodes]
    healthy = True
    for node in nodes:
        pid = read_pid(node.pid_path)
        if pid is not None and _is_node_broker(pid, node.dir):
            answers = broker_answers(node.address, ids, _PROBE_TIMEOUT_S)
            state = f"running (pid {pid}), {'answering' if answers else 'NOT answering'}"
            healthy = healthy and answers
        else:
            state = "stopped"
            healthy = False
        print(f"broker {node.node_id}  {node.address}  {state}")
    return 0 if healthy else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.kafka",
        description="Run local Apache Kafka (KRaft) brokers as background JVM processes.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dir_help = "data dir holding the node dirs (default: var/kafka in the repo)"

    up = commands.add_parser("up", help="start brokers in the background and wait for them")
    up.add_argument("--dir", type=Path, default=DEFAULT_DATA_DIR, help=dir_help)
    up.add_argument(
        "--port",
        type=int,
        default=9092,
        help="first broker port; broker i gets port+i (default: 9092)",
    )
    up.add_argument("--brokers", type=int, default=1, help="number of brokers (default: 1)")
    up.add_argument("--fresh", action="store_true", help="stop and wipe the data dir first")
    up.add_argument("--heap", default="512m", help="JVM heap per broker (default: 512m)")
    up.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for readiness"
    )
    up.add_argument("--jars", type=Path, default=DEFAULT_JARS_DIR, help=argparse.SUPPRESS)
    up.set_defaults(func=_cmd_up)

    down = commands.add_parser("down", help="stop brokers started from the data dir")
    down.add_argument("--dir", type=Path, default=DEFAULT_DATA_DIR, help=dir_help)
    down.set_defaults(func=_cmd_down)

    status = commands.add_parser("status", help="show which brokers run and answer")
    status.add_argument("--dir", type=Path, default=DEFAULT_DATA_DIR, help=dir_help)
    status.set_defaults(func=_cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_parser(), argv, KafkaBrokerError)


if __name__ == "__main__":
    sys.exit(main())
