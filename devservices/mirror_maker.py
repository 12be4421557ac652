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
    python -m devservices.mirror_maker down --dir var/mm2

Layout of a work dir::

    <work_dir>/mm2.properties    MM2 config, rewritten on every start
    <work_dir>/log4j.properties
    <work_dir>/mm2.log           MM2's log: WARN and up, INFO from the mirror connectors
    <work_dir>/mm2.out           JVM stdout+stderr (crashes before logging starts)
    <work_dir>/mm2.pid           pid (= process group id) while it runs

MM2 keeps its progress in internal topics on the target (``mm2-offsets.source.internal``...),
so a second run against the same target resumes where the first stopped.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from core.paths import VAR_DIR
from core.processes import StopOnExit, pid_alive, read_pid, signal_group, terminate, wait_gone
from devservices import _cli as cli
from devservices.kafka import DEFAULT_JARS_DIR, jvm_command, log_tail

log = logging.getLogger("uatu.mirror_maker")

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
SOURCE = "source"
TARGET = "target"
DEFAULT_WORK_DIR = VAR_DIR / "mm2"
DEFAULT_HEAP = "1g"
STOP_TIMEOUT_S = 30.0


class MirrorMakerError(RuntimeError):
    """MM2 could not be started, or exited while it should be running."""


class MirrorMakerProcess(StopOnExit):
    """A running MM2 started by :func:`start_mirror_maker`; stops on :meth:`stop` or at the end
    of a ``with`` block, not when this object is dropped."""

    def __init__(self, work_dir: Path, process: subprocess.Popen[bytes]) -> None:
        self.work_dir = work_dir
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def config_path(self) -> Path:
        return config_path(self.work_dir)

    @property
    def log_path(self) -> Path:
        return self.work_dir / "mm2.log"

    @property
    def out_path(self) -> Path:
        return self.work_dir / "mm2.out"

    @property
    def pid_path(self) -> Path:
        return pid_path(self.work_dir)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def check_running(self) -> None:
        """Raise :class:`MirrorMakerError` with the log tails if MM2 has exited.

        Meant for polling loops: a bad config makes MM2 exit, not stall, and the loop should
        fail with the reason instead of at its deadline.
        """
        code = self.process.poll()
        if code is not None:
            raise MirrorMakerError(
                f"MirrorMaker exited with code {code}; tail of {self.log_path}:\n"
                f"{log_tail(self.log_path)}\ntail of {self.out_path}:\n{log_tail(self.out_path)}"
            )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (MM2 stops its connectors and commits offsets), SIGKILL the process group
        after ``timeout`` seconds. Idempotent; removes the pid file."""
        if self.is_running():
            log.info("stopping MirrorMaker (pid %d)", self.pid)
        terminate(self.process, timeout)
        self.pid_path.unlink(missing_ok=True)


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
    work_dir: Path, jars_dir: Path = DEFAULT_JARS_DIR, heap: str = DEFAULT_HEAP
) -> list[str]:
    """argv of the MM2 JVM for the config and log4j files in ``work_dir``."""
    return jvm_command(
        jars_dir, work_dir / "log4j.properties", MAIN_CLASS, str(config_path(work_dir)), heap=heap
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
) -> MirrorMakerProcess:
    """Write the config (see :func:`mm2_properties`) into ``work_dir`` and start MM2 on it.

    Returns as soon as the JVM is launched: MM2 has no readiness signal worth waiting for, and
    the first records reach the target some seconds later (joining the internal-topic groups,
    then the first topic refresh). Poll the target, calling
    :meth:`MirrorMakerProcess.check_running` in the loop. Raises :class:`MirrorMakerError` if
    the jars are missing or an MM2 from ``work_dir`` is still running.
    """
    work_dir = work_dir.resolve()
    jars_dir = jars_dir.resolve()
    if not any(jars_dir.glob("connect-mirror-[0-9]*.jar")):
        raise MirrorMakerError(f"no connect-mirror jar in {jars_dir}; run `make jars`")
    live = running_pid(work_dir)
    if live is not None:
        raise MirrorMakerError(f"MirrorMaker from {work_dir} is already running (pid {live})")
    work_dir.mkdir(parents=True, exist_ok=True)
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
    config_path(work_dir).write_text(render_properties(props))
    (work_dir / "log4j.properties").write_text(_log4j_properties(work_dir / "mm2.log"))

    cmd = mm2_command(work_dir, jars_dir, heap)
    log.info("starting MirrorMaker %s -> %s, topics %r", source_bootstrap, target_bootstrap, topics)
    with (work_dir / "mm2.out").open("wb") as out:
        process = subprocess.Popen(
            cmd,
            cwd=work_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own process group: Ctrl-C in the caller's terminal does not reach it, and stop()
            # can signal the whole group.
            start_new_session=True,
        )
    pid_path(work_dir).write_text(f"{process.pid}\n")
    return MirrorMakerProcess(work_dir, process)


def stop_from_pidfile(work_dir: Path, timeout: float = STOP_TIMEOUT_S) -> int | None:
    """Stop the MM2 a previous process started from ``work_dir``; return its pid, None if none
    ran. A pid file naming some other process is just removed."""
    work_dir = work_dir.resolve()
    pid = running_pid(work_dir)
    if pid is not None:
        signal_group(pid, signal.SIGTERM)
        if wait_gone([pid], timeout):
            log.warning("MirrorMaker pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout)
            signal_group(pid, signal.SIGKILL)
            wait_gone([pid], 10.0)
    pid_path(work_dir).unlink(missing_ok=True)
    return pid


def running_pid(work_dir: Path) -> int | None:
    """The pid in ``work_dir``'s pid file if it is still that work dir's MM2."""
    pid = read_pid(pid_path(work_dir))
    if pid is None or not pid_alive(pid):
        return None
    # Pids get reused: only trust the file if the process runs MM2 on this work dir's config.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return pid if not Path("/proc/self").exists() else None  # no procfs: liveness only
    wanted = str(config_path(work_dir.resolve())).encode()
    return pid if MAIN_CLASS.encode() in cmdline and wanted in cmdline else None


def config_path(work_dir: Path) -> Path:
    return work_dir / "mm2.properties"


def pid_path(work_dir: Path) -> Path:
    return work_dir / "mm2.pid"


def _log4j_properties(log_file: Path) -> str:
    layout = "org.apache.log4j.PatternLayout"
    pattern = "[%d] %p %m (%c)%n"
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


def _cmd_up(args: argparse.Namespace) -> int:
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
    log.info("MirrorMaker running (pid %d); log in %s", mm2.pid, mm2.log_path)
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    pid = stop_from_pidfile(args.dir)
    if pid is None:
        log.info("no MirrorMaker running from %s", args.dir.resolve())
    else:
        log.info("stopped MirrorMaker pid %d", pid)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.mirror_maker",
        description="Run Apache Kafka MirrorMaker 2 (dedicated mode) as a background JVM, "
        "replicating one source cluster's topics to a target under the same names.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dir_help = "work dir for config, logs and pid file (default: var/mm2 in the repo)"

    up = commands.add_parser("up", help="write the config and start MM2 in the background")
    up.add_argument("--dir", type=Path, default=DEFAULT_WORK_DIR, help=dir_help)
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
    up.set_defaults(func=_cmd_up)

    down = commands.add_parser("down", help="stop the MM2 started from the work dir")
    down.add_argument("--dir", type=Path, default=DEFAULT_WORK_DIR, help=dir_help)
    down.set_defaults(func=_cmd_down)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_parser(), argv, MirrorMakerError)


if __name__ == "__main__":
    sys.exit(main())
