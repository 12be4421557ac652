"""Real Apache Kafka (KRaft) brokers as plain JVM processes on 127.0.0.1.

Used by the integration tests (:func:`start_cluster`, the ``kafka`` and ``kafka_dest``
fixtures) and by ``make kafka-up`` / ``make kafka-down`` through the CLI at the bottom::

    python -m devservices.kafka up [--dir var/kafka] [--port 9092] [--brokers 1] [--fresh]
    python -m devservices.kafka status [--dir var/kafka]
    python -m devservices.kafka down [--dir var/kafka]

Every node is a combined broker+controller, so a 3-node cluster is also a 3-voter quorum that
keeps working when any one node dies. Each node is a :class:`~devservices._service.LocalService`
and the cluster composes them. Layout of a data dir::

    <data_dir>/node-<i>/server.properties   broker config, rewritten on every start
    <data_dir>/node-<i>/log4j.properties
    <data_dir>/node-<i>/data/               log.dirs, including the KRaft metadata log
    <data_dir>/node-<i>/kafka.out           JVM stdout+stderr of the current run
    <data_dir>/node-<i>/server.log          broker log, WARN and up, rolled at 10 MB
    <data_dir>/node-<i>/kafka.pid           pid (= process group id) while it runs
    <data_dir>/node-<i>/kafka.ports         broker and controller port of the last run
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from core.kafka_admin import create_topic
from core.paths import KAFKA_JARS_DIR, VAR_DIR
from core.processes import free_ports
from devservices._service import (
    HOST,
    LocalService,
    Port,
    ServiceCli,
    ServiceError,
    StopOnExit,
    stop_all,
    stopped_on_failure,
    wait_all_ready,
)
from devservices._service import log_tail as log_tail  # re-exported for older callers

log = logging.getLogger("uatu.kafka")

DEFAULT_JARS_DIR = KAFKA_JARS_DIR
DEFAULT_DATA_DIR = VAR_DIR / "kafka"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0
_FORMAT_TIMEOUT_S = 120.0


class KafkaBrokerError(ServiceError):
    """A broker failed to start, did not answer in time, or refused a request."""


class BrokerNode(LocalService):
    """One combined broker+controller JVM in ``dir`` (``node-<node_id>`` of the data dir).

    ``node_id`` equals the node's index in :attr:`KafkaCluster.brokers`; ``cluster_ids`` are
    the ids of every node of its cluster, which it must list in its metadata to be ready.
    """

    error = KafkaBrokerError
    ready_timeout = READY_TIMEOUT_S
    stop_timeout = STOP_TIMEOUT_S
    poll_interval = _POLL_INTERVAL_S
    port = Port("broker")
    controller_port = Port("controller")

    def __init__(
        self,
        node_id: int,
        port: int,
        controller_port: int,
        dir: Path,
        rack: str | None = None,
        cluster_ids: Sequence[int] = (),
    ) -> None:
        super().__init__(
            dir,
            "kafka",
            ports={"broker": port, "controller": controller_port},
            label=f"broker {node_id}",
        )
        self.node_id = node_id
        self.rack = rack  # broker.rack, the zone probes are tagged with
        self.cluster_ids = list(cluster_ids) or [node_id]

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log4j_path(self) -> Path:
        return self.dir / "log4j.properties"

    @property
    def data_path(self) -> Path:
        return self.dir / "data"

    def ready(self) -> bool:
        return broker_answers(self.address, self.cluster_ids, _PROBE_TIMEOUT_S)

    def describe(self) -> str:
        return self.address

    def launch_broker(self, jars_dir: Path, heap: str) -> None:
        """Launch the broker JVM on this node's config; returns at once."""
        cmd = jvm_command(
            jars_dir, self.log4j_path, "kafka.Kafka", str(self.config_path), heap=heap
        )
        self.launch(cmd)


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
        stop_all(self.brokers, timeout)

    def kill_broker(self, i: int) -> None:
        """SIGKILL broker ``i`` (no controlled shutdown) and reap it."""
        broker = self.brokers[i]
        if not broker.is_running():
            raise KafkaBrokerError(f"broker {i} is not running")
        broker.kill()

    def restart_broker(self, i: int, timeout: float = READY_TIMEOUT_S) -> None:
        """Start broker ``i`` again with its existing config and storage.

        A broker that is still running is stopped gracefully first. Returns once every running
        broker answers with metadata listing all of them, broker ``i`` included: a broker lists
        itself only once the controller has unfenced it, and the others learn of it a moment
        later, so a client may reach any of them right after this returns.
        """
        broker = self.brokers[i]
        broker.stop()
        log.info("restarting broker %d on %s", i, broker.address)
        broker.launch_broker(self.jars_dir, self.heap)
        running = [b for b in self.brokers if b.is_running()]
        _wait_listed(running, [b.node_id for b in running], timeout)

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
        ``replica_assignment`` (one broker list per partition) replaces it. Raises
        :class:`KafkaBrokerError` if creation fails or leaders do not appear in time."""
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


class ExtraListener(Protocol):
    """A listener added to a one-broker cluster, such as ``testing.kafka_security.SaslSsl``:
    it rewrites the broker's properties (listener lists, keystore, JAAS) and, once the broker
    answers on PLAINTEXT, creates what the listener needs in the cluster (SCRAM users)."""

    def merge_listeners(self, properties: Mapping[str, str]) -> dict[str, str]: ...

    def create_scram_users(self, admin: AdminClient, timeout_s: float = 30.0) -> None: ...


def start_cluster(
    data_dir: Path,
    n_brokers: int = 1,
    base_port: int | None = None,
    jars_dir: Path = DEFAULT_JARS_DIR,
    heap: str = "512m",
    timeout: float = READY_TIMEOUT_S,
    racks: Sequence[str] | None = None,
    sasl_ssl: ExtraListener | None = None,
) -> KafkaCluster:
    """Start ``n_brokers`` combined broker+controller nodes under ``data_dir`` and wait for them.

    ``racks`` gives each node its ``broker.rack`` (one per broker), None none.

    ``sasl_ssl`` adds a secured listener to a one-broker cluster (see :class:`ExtraListener`);
    PLAINTEXT stays the inter-broker listener and the one ``bootstrap_servers`` names.

    Broker ports are ``base_port``, ``base_port + 1``, ... or free ports when ``base_port`` is
    None; controller ports are always free ports. A data dir that already holds a cluster is
    reused (same cluster id, controller ports and, without ``base_port``, broker ports); its
    broker count must match. Returns once every broker lists all ``n_brokers`` brokers in its
    metadata; on failure or after ``timeout`` seconds stops what it started and raises
    :class:`KafkaBrokerError` carrying the tail of the broker's output.
    """
    if n_brokers < 1:
        raise ValueError(f"n_brokers must be >= 1, got {n_brokers}")
    if sasl_ssl is not None and n_brokers != 1:
        raise ValueError(f"sasl_ssl needs n_brokers=1 (one listener port), got {n_brokers}")
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
    cluster_id = _existing_cluster_id(nodes) or _new_cluster_id()
    for node in nodes:
        node.dir.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(_server_properties(node, nodes, sasl_ssl))
        node.log4j_path.write_text(_log4j_properties(node))
    _format_storage(nodes, cluster_id, jars_dir)

    cluster = KafkaCluster(data_dir, nodes, jars_dir, heap)
    with stopped_on_failure(cluster):
        for node in nodes:
            node.launch_broker(jars_dir, heap)
        _wait_listed(nodes, [n.node_id for n in nodes], timeout)
        if sasl_ssl is not None:
            sasl_ssl.create_scram_users(cluster.admin())
    return cluster


def running_pids(data_dir: Path) -> list[int]:
    """Pids of the brokers of ``data_dir`` that run, as their pid files say."""
    return [pid for node in load_nodes(data_dir) if (pid := node.running_pid()) is not None]


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
    ids = [n.node_id for n in nodes]
    for node in nodes:
        node.cluster_ids = ids
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


def _wait_listed(nodes: Sequence[BrokerNode], ids: Sequence[int], timeout: float) -> None:
    """Return once every node lists ``ids`` in its metadata; raise if one exits or time is up."""
    pending = list(nodes)

    def all_listed() -> bool:
        for node in list(pending):
            if broker_answers(node.address, ids, _PROBE_TIMEOUT_S):
                log.info("broker ready: %s", node.address)
                pending.remove(node)
        return not pending

    took = wait_all_ready(nodes, all_listed, timeout, f"list brokers {sorted(ids)}")
    log.info("%d broker(s) ready (took %.1f s)", len(nodes), took)


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
    ids = list(range(n_brokers))
    return [
        BrokerNode(i, ports[i], controller_ports[i], data_dir / f"node-{i}", cluster_ids=ids)
        for i in range(n_brokers)
    ]


def _server_properties(
    node: BrokerNode, nodes: Sequence[BrokerNode], extra: ExtraListener | None = None
) -> str:
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
        "group.initial.rebalance.delay.ms": 0,
        # No KIP-835 no-op metadata records (one per 500 ms): an idle broker's CPU, for nothing.
        "metadata.max.idle.interval.ms": 0,
        # Tests must create their topics explicitly; a typo should fail, not create a topic.
        "auto.create.topics.enable": "false",
    }
    if node.rack is not None:
        props["broker.rack"] = node.rack
    rendered = {k: str(v) for k, v in props.items()}
    if extra is not None:
        rendered = extra.merge_listeners(rendered)
    lines = [f"{k}={_escape(v)}" for k, v in rendered.items()]
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


SERIAL_GC = "-XX:+UseSerialGC"  # small heaps, one GC thread: the test services' collector
G1_GC = "-XX:+UseG1GC"  # the JVM's own choice on this machine, and Kafka's scripts' choice
# Extra JVM flags for every service JVM started here (whitespace-separated). The test suite
# sets "-XX:TieredStopAtLevel=1" (tests/conftest.py): its brokers live minutes and carry little
# load, so C2's compile work is CPU the suite needs elsewhere. Benchmarks leave it unset.
SERVICE_JAVA_OPTS_ENV = "UATU_SERVICE_JAVA_OPTS"


def jvm_command(
    jars_dir: Path,
    log4j: Path,
    main: str,
    *args: str,
    heap: str | None = None,
    gc: str = SERIAL_GC,
) -> list[str]:
    """argv running ``main`` on the jars in ``jars_dir``, logging as ``log4j`` says.

    Java comes from ``JAVA_HOME`` or else ``PATH``; ``heap`` (e.g. ``"512m"``) sets both -Xms
    and -Xmx, None leaves the JVM's default; ``gc`` is the collector's flag (SERIAL_GC or
    G1_GC); ``UATU_SERVICE_JAVA_OPTS`` adds flags. Shared by the other tools that run Kafka's
    JVMs.
    """
    heap_flags = [f"-Xmx{heap}", f"-Xms{heap}"] if heap else []
    return [
        _java(),
        *heap_flags,
        gc,
        *os.environ.get(SERVICE_JAVA_OPTS_ENV, "").split(),
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


# --- CLI -------------------------------------------------------------------------------------


def _up_arguments(up: argparse.ArgumentParser) -> None:
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


def _fresh(args: argparse.Namespace) -> None:
    if not args.fresh:
        return
    stop_all(load_nodes(args.dir))
    if not args.dir.exists():
        return
    strangers = [p.name for p in args.dir.iterdir() if not p.name.startswith("node-")]
    if strangers:
        # A mistyped --dir must not cost someone their home directory.
        raise KafkaBrokerError(f"not wiping {args.dir}: it holds more than node dirs {strangers}")
    log.info("wiping %s", args.dir)
    shutil.rmtree(args.dir)


def _asked_ports(args: argparse.Namespace) -> list[int]:
    return [args.port + i for i in range(args.brokers)]


def _start(args: argparse.Namespace) -> list[BrokerNode]:
    cluster = start_cluster(
        args.dir,
        n_brokers=args.brokers,
        base_port=args.port,
        jars_dir=args.jars,
        heap=args.heap,
        timeout=args.timeout,
    )
    log.info("kafka up: bootstrap.servers=%s", cluster.bootstrap_servers)
    return cluster.brokers


main = ServiceCli(
    "devservices.kafka",
    __doc__,
    DEFAULT_DATA_DIR,
    load_nodes,
    _start,
    _up_arguments,
    asked_ports=_asked_ports,
    prepare=_fresh,
).main


if __name__ == "__main__":
    sys.exit(main())
