"""Apache Kafka MirrorMaker 2 (dedicated mode) as a background JVM, the baseline the replication
benchmark compares our Spark job against.

One flow, ``source -> target``, of the topics matching ``topics`` (MM2's comma-separated list of
regexes). The target topics keep their names (IdentityReplicationPolicy) and MM2 creates them
with the source's partition count; record ``i`` of source partition ``p`` lands in partition
``p`` of the target, in order. Every internal topic has replication factor 1, so single-broker
clusters are enough::

    with start_mirror_maker(work_dir, src.bootstrap_servers, dst.bootstrap_servers, "bench"):
        ...  # poll the target until it holds what the source does

    python -m devservices.mirror_maker up --dir var/mm2 --source 127.0.0.1:9092 \\
        --target 127.0.0.1:9093 --topics bench
    python -m devservices.mirror_maker status|down --dir var/mm2

Layout of a work dir::

    <work_dir>/mm2.properties    MM2 config, rewritten on every start
    <work_dir>/log4j.properties
    <work_dir>/mm2.log           MM2's log: WARN and up, INFO from the mirror connectors
                                 (and every consumer's config with log_consumer_configs)
    <work_dir>/mm2.out           JVM stdout+stderr (crashes before logging starts)
    <work_dir>/mm2.pid           pid (= process group id) while it runs
    <work_dir>/mm2.ports         {} (MM2 listens on no port)

MM2 keeps its progress in internal topics on the target (``mm2-offsets.source.internal``...),
so a second run against the same target resumes where the first stopped.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from core.paths import VAR_DIR
from devservices._service import LocalService, ServiceCli, ServiceError
from devservices.kafka import DEFAULT_JARS_DIR, SERIAL_GC, jvm_command

log = logging.getLogger("uatu.mirror_maker")

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
SOURCE = "source"
TARGET = "target"
DEFAULT_WORK_DIR = VAR_DIR / "mm2"
DEFAULT_HEAP = "1g"
STOP_TIMEOUT_S = 30.0


class MirrorMakerError(ServiceError):
    """MM2 could not be started, or exited while it should be running."""


class MirrorMakerProcess(LocalService):
    """MM2 running from ``work_dir``, started by :func:`start_mirror_maker`; it stops on
    :meth:`stop` or at the end of a ``with`` block, not when this object is dropped.

    Has no readiness signal worth waiting for: poll the target and call
    :meth:`check_running` in the loop.
    """

    error = MirrorMakerError
    stop_timeout = STOP_TIMEOUT_S  # on SIGTERM MM2 stops its connectors and commits offsets

    def __init__(self, work_dir: Path) -> None:
        super().__init__(work_dir, "mm2", label="MirrorMaker")

    @property
    def work_dir(self) -> Path:
        return self.dir

    @property
    def pid(self) -> int:
        """The pid (= process group id) of the launched JVM."""
        assert self.process is not None, "MirrorMaker was never launched"
        return self.process.pid

    @property
    def config_path(self) -> Path:
        return config_path(self.dir)

    @property
    def log_path(self) -> Path:
        """MM2's log4j log; :attr:`out_path` has the JVM's stdout and stderr."""
        return self.dir / "mm2.log"


def mm2_properties(
    source_bootstrap: str,
    target_bootstrap: str,
    topics: str,
    *,
    tasks: int = 4,
    producer_acks: str = "all",
    emit_checkpoints: bool = False,
    emit_heartbeats: bool = False,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The MM2 config for one ``source -> target`` flow of ``topics`` (comma-separated regexes).

    ``tasks`` is ``tasks.max``: MM2 spreads the topic-partitions over at most that many tasks.
    ``producer_acks`` applies to the producers writing into the target. Checkpoints (consumer
    group offset translation) and heartbeats are off by default: they are not replication and
    would only add traffic to a throughput run. (MM2 still configures its checkpoint connector
    and logs one harmless ERROR, "MirrorCheckpointConnector can't run with
    emit.checkpoints.enabled set to false".) The target producers otherwise keep the Connect
    worker's defaults: acks=all, enable.idempotence=false, max.in.flight.requests.per.connection=1
    (which is what keeps each partition in order across retries), linger.ms=0.

    ``extra`` entries win over everything, e.g. ``{"target.producer.linger.ms": "5"}`` or
    ``{"source->target.offset.lag.max": "1000"}``. Raising the target producers' in-flight
    limit needs ``target.producer.enable.idempotence=true`` too, or retries may reorder.
    """
    props = {
        "clusters": f"{SOURCE}, {TARGET}",
        f"{SOURCE}.bootstrap.servers": source_bootstrap,
        f"{TARGET}.bootstrap.servers": target_bootstrap,
        f"{SOURCE}->{TARGET}.enabled": "true",
        f"{SOURCE}->{TARGET}.topics": topics,
        f"{TARGET}->{SOURCE}.enabled": "false",
        # Same topic names on the target as on the source, as our replication job writes them.
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "tasks.max": str(tasks),
        # Single-broker test clusters: every topic MM2 creates, mirrored or internal, has RF 1.
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "emit.checkpoints.enabled": _bool(emit_checkpoints),
        "emit.heartbeats.enabled": _bool(emit_heartbeats),
        "sync.group.offsets.enabled": "false",
        # The test brokers run without an authorizer; ACL sync would only log errors.
        "sync.topic.acls.enabled": "false",
        # How soon a new source topic is noticed; the 10 min default would stall short runs.
        "refresh.topics.interval.seconds": "5",
        "refresh.groups.interval.seconds": "5",
        # Find the connectors through their ServiceLoader manifests instead of scanning every
        # jar on the classpath: ~2 s less start-up. Once for MM2 itself, once for the worker of
        # the flow (whose config is built from the target cluster's properties).
        "plugin.discovery": "service_load",
        f"{TARGET}.plugin.discovery": "service_load",
        f"{TARGET}.producer.acks": producer_acks,
        # Mirror what is already in the topic, not only what arrives after MM2 starts.
        f"{SOURCE}.consumer.auto.offset.reset": "earliest",
    }
    props.update(extra or {})
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """``props`` as a Java .properties file, in the given order."""
    lines = [f"{_escape_key(k)}={_escape_value(v)}" for k, v in props.items()]
    return (
        "# Written by devservices/mirror_maker.py on every start; edits are lost.\n"
        + "\n".join(lines)
        + "\n"
    )


def mm2_command(
    work_dir: Path, jars_dir: Path = DEFAULT_JARS_DIR, heap: str = DEFAULT_HEAP, gc: str = SERIAL_GC
) -> list[str]:
    """argv of the MM2 JVM for the config and log4j files in ``work_dir``."""
    return jvm_command(
        jars_dir,
        work_dir / "log4j.properties",
        MAIN_CLASS,
        str(config_path(work_dir)),
        heap=heap,
        gc=gc,
    )


def start_mirror_maker(
    work_dir: Path,
    source_bootstrap: str,
    target_bootstrap: str,
    topics: str,
    *,
    tasks: int = 4,
    producer_acks: str = "all",
    emit_checkpoints: bool = False,
    emit_heartbeats: bool = False,
    extra: Mapping[str, str] | None = None,
    jars_dir: Path = DEFAULT_JARS_DIR,
    heap: str = DEFAULT_HEAP,
    gc: str = SERIAL_GC,
    log_consumer_configs: bool = False,
) -> MirrorMakerProcess:
    """Write the config (see :func:`mm2_properties`) into ``work_dir`` and start MM2 on it.

    ``heap`` sets the JVM's -Xms and -Xmx, ``gc`` its collector (devservices.kafka.SERIAL_GC
    or G1_GC). With ``log_consumer_configs`` the log also holds
    the ``ConsumerConfig values:`` block of every consumer MM2 creates (a page each), which
    :func:`logged_consumer_configs` reads back: the proof that ``<alias>.consumer.*``
    settings reached the consumers.

    Returns as soon as the JVM is launched: MM2 has no readiness signal worth waiting for, and
    the first records reach the target some seconds later (joining the internal-topic groups,
    then the first topic refresh). Poll the target, calling
    :meth:`MirrorMakerProcess.check_running` in the loop. Raises :class:`MirrorMakerError` if
    the jars are missing or an MM2 from ``work_dir`` is still running.
    """
    jars_dir = jars_dir.resolve()
    if not any(jars_dir.glob("connect-mirror-[0-9]*.jar")):
        raise MirrorMakerError(f"no connect-mirror jar in {jars_dir}; run `make jars`")
    mm2 = MirrorMakerProcess(work_dir)
    mm2.dir.mkdir(parents=True, exist_ok=True)
    props = mm2_properties(
        source_bootstrap,
        target_bootstrap,
        topics,
        tasks=tasks,
        producer_acks=producer_acks,
        emit_checkpoints=emit_checkpoints,
        emit_heartbeats=emit_heartbeats,
        extra=extra,
    )
    mm2.config_path.write_text(render_properties(props))
    (mm2.dir / "log4j.properties").write_text(
        _log4j_properties(mm2.log_path, consumer_configs=log_consumer_configs)
    )
    log.info("starting MirrorMaker %s -> %s, topics %r", source_bootstrap, target_bootstrap, topics)
    mm2.launch(mm2_command(mm2.dir, jars_dir, heap, gc))
    return mm2


def config_path(work_dir: Path) -> Path:
    return work_dir / "mm2.properties"


def logged_consumer_configs(log_text: str, client_id_part: str = "") -> list[dict[str, str]]:
    """The ``ConsumerConfig values:`` blocks of an MM2 log (see ``log_consumer_configs``), one
    dict of setting -> value as logged per consumer, in log order; only those whose
    ``client.id`` contains ``client_id_part`` (MM2's copying consumers: ``replication-consumer``).
    """
    configs: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in log_text.splitlines():
        if "ConsumerConfig values:" in line:
            current = {}
            configs.append(current)
        elif current is not None and line.startswith("\t") and " = " in line:
            key, _, value = line.strip().partition(" = ")
            current[key] = value
        else:
            current = None
    return [c for c in configs if client_id_part in c.get("client.id", "")]


def _log4j_properties(log_file: Path, *, consumer_configs: bool = False) -> str:
    layout = "org.apache.log4j.PatternLayout"
    pattern = "[%d] %p %m (%c)%n"
    consumers = "INFO" if consumer_configs else "WARN"
    return f"""\
# Written by devservices/mirror_maker.py. At INFO the Connect runtime logs every client config it
# builds (pages per task); WARN keeps the file readable, the mirror connectors stay at INFO
# so the log shows which topic-partitions were assigned and when.
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File={_escape_value(str(log_file))}
log4j.appender.file.MaxFileSize=10MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout={layout}
log4j.appender.file.layout.ConversionPattern={pattern}
log4j.logger.org.apache.kafka.connect.mirror=INFO
# ...except the config classes, which dump every setting once per connector and task.
log4j.logger.org.apache.kafka.connect.mirror.MirrorMakerConfig=WARN
log4j.logger.org.apache.kafka.connect.mirror.MirrorSourceConfig=WARN
log4j.logger.org.apache.kafka.connect.mirror.MirrorSourceTaskConfig=WARN
log4j.logger.org.apache.kafka.connect.mirror.MirrorCheckpointConfig=WARN
log4j.logger.org.apache.kafka.connect.mirror.MirrorCheckpointTaskConfig=WARN
log4j.logger.org.apache.kafka.connect.mirror.MirrorHeartbeatConfig=WARN
# INFO: one "ConsumerConfig values:" block per consumer (log_consumer_configs).
log4j.logger.org.apache.kafka.clients.consumer.ConsumerConfig={consumers}
"""


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _escape_value(value: str) -> str:
    # Java .properties: a backslash escapes (regex topic lists have them), a leading space is
    # dropped unless escaped.
    value = value.replace("\\", "\\\\")
    return "\\" + value if value.startswith(" ") else value


def _escape_key(key: str) -> str:
    # "->" in flow keys is fine; these would end the key or start a comment.
    for ch in ("\\", " ", "=", ":", "#", "!"):
        key = key.replace(ch, "\\" + ch)
    return key


# --- CLI -------------------------------------------------------------------------------------


def _parse_set(items: Sequence[str]) -> dict[str, str]:
    extra = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise MirrorMakerError(f"--set wants KEY=VALUE, got {item!r}")
        extra[key] = value
    return extra


def _recorded(dir: Path) -> list[MirrorMakerProcess]:
    return [MirrorMakerProcess(dir)] if config_path(dir).exists() else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--source", required=True, help="source bootstrap servers")
    up.add_argument("--target", required=True, help="target bootstrap servers")
    up.add_argument("--topics", required=True, help="comma-separated topic regexes to mirror")
    up.add_argument("--tasks", type=int, default=4, help="tasks.max (default: 4)")
    up.add_argument("--acks", default="all", help="acks of the target producers (default: all)")
    up.add_argument("--checkpoints", action="store_true", help="emit consumer-group checkpoints")
    up.add_argument("--heartbeats", action="store_true", help="emit heartbeats")
    up.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra MM2 property, wins over the defaults; repeatable",
    )
    up.add_argument("--heap", default=DEFAULT_HEAP, help=f"JVM heap (default: {DEFAULT_HEAP})")


def _start(args: argparse.Namespace) -> list[MirrorMakerProcess]:
    mm2 = start_mirror_maker(
        args.dir,
        args.source,
        args.target,
        args.topics,
        tasks=args.tasks,
        producer_acks=args.acks,
        emit_checkpoints=args.checkpoints,
        emit_heartbeats=args.heartbeats,
        extra=_parse_set(args.set),
        heap=args.heap,
    )
    log.info("MirrorMaker log in %s", mm2.log_path)
    return [mm2]


main = ServiceCli(
    "devservices.mirror_maker", __doc__, DEFAULT_WORK_DIR, _recorded, _start, _up_arguments
).main


if __name__ == "__main__":
    sys.exit(main())
