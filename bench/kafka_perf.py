"""Kafka's own load tools, ProducerPerformance and ConsumerPerformance (kafka-tools 3.9), as
Python functions returning their summary figures.

They are the raw-client baselines of the benchmarks: what a plain Java producer or consumer
does against the same brokers. Each call is one JVM run on ``var/jars/kafka``::

    from bench.kafka_perf import consumer_perf, producer_perf

    p = producer_perf(producer_perf_args("127.0.0.1:9092", "bench", 200_000, 200, acks="all"))
    c = consumer_perf("127.0.0.1:9092", "bench", 200_000)
    print(p.records_per_s, p.p99_ms, c.fetch_records_per_s)

The argument lists are built by pure functions (:func:`producer_perf_args`,
:func:`consumer_perf_args`) and the output is read by pure parsers
(:func:`parse_producer_output`, :func:`parse_consumer_output`), so both are testable without a
broker, and usable by a bench that starts the tools' JVM its own way. No shell is involved
anywhere.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devservices.kafka import DEFAULT_JARS_DIR, SERIAL_GC, jvm_command

PRODUCER_MAIN = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_MAIN = "org.apache.kafka.tools.ConsumerPerformance"
DEFAULT_HEAP = "1g"
DEFAULT_RUN_TIMEOUT_S = 900.0

# The final line of ProducerPerformance (its periodic progress lines lack the percentiles):
# "200000 records sent, 70028.011204 records/sec (13.36 MB/sec), 836.97 ms avg latency,
#  1134.00 ms max latency, 845 ms 50th, 1059 ms 95th, 1104 ms 99th, 1128 ms 99.9th."
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_PRODUCER_SUMMARY = re.compile(
    rf"^([0-9]+) records sent, {_NUM} records/sec \({_NUM} MB/sec\), {_NUM} ms avg latency, "
    rf"{_NUM} ms max latency, ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th, "
    rf"([0-9]+) ms 99\.9th\.$",
    re.MULTILINE,
)
# ConsumerPerformance prints this before its summary row when --timeout passed without a record.
_CONSUMER_TIMEOUT = "WARNING: Exiting before consuming the expected number of messages"

# Only ERROR and up, to stderr: the tools' results go to stdout, which is what gets parsed.
_QUIET_LOG4J = """\
log4j.rootLogger=ERROR, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class KafkaPerfError(RuntimeError):
    """A perf tool exited non-zero, ran past its time limit, or printed no summary."""


@dataclass(frozen=True)
class ProducerPerfResult:
    """ProducerPerformance's final summary line. Latencies are send-to-ack, in milliseconds."""

    records: int
    records_per_s: float
    mb_per_s: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int


@dataclass(frozen=True)
class ConsumerPerfResult:
    """ConsumerPerformance's summary row (MB = 2^20 bytes, as the tool counts).

    The plain rates divide by the whole run including the group join; the ``fetch_*`` ones by
    ``fetch_ms`` only, which is the figure comparable to a steady-state consumer. ``timed_out``
    is True when the tool gave up after ``--timeout`` ms without a record, so ``records`` may be
    short of what was asked for; the caller decides whether that is an error.
    """

    start_time: str
    end_time: str
    mb: float
    mb_per_s: float
    records: int
    records_per_s: float
    rebalance_ms: int
    fetch_ms: int
    fetch_mb_per_s: float
    fetch_records_per_s: float
    timed_out: bool


# --- argument lists --------------------------------------------------------------------------


def producer_perf_args(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int | None,
    *,
    acks: str = "all",
    throughput: int = -1,
    extra_props: Mapping[str, str] | None = None,
    payload_file: Path | None = None,
) -> list[str]:
    """ProducerPerformance's arguments: random payloads of ``record_size`` bytes, no keys; or,
    with ``payload_file`` (and ``record_size`` None), values drawn at random from its lines.
    ValueError unless exactly one of the two is given.

    ``throughput`` caps records/s, -1 means unthrottled. ``extra_props`` are producer configs
    (``linger.ms``, ``compression.type``...) and override ``bootstrap``/``acks`` if they repeat
    them.
    """
    if (record_size is None) == (payload_file is None):
        raise ValueError("give either record_size or payload_file")
    payload = (
        ["--record-size", str(record_size)]
        if payload_file is None
        else ["--payload-file", str(payload_file)]
    )
    props = {"bootstrap.servers": bootstrap, "acks": acks, **(extra_props or {})}
    return [
        "--topic",
        topic,
        "--num-records",
        str(num_records),
        *payload,
        "--throughput",
        str(throughput),
        # Takes one or more values, so it stays last.
        "--producer-props",
        *(f"{k}={v}" for k, v in props.items()),
    ]


def consumer_perf_args(
    bootstrap: str,
    topic: str,
    messages: int,
    *,
    timeout_ms: int = 10_000,
    group: str | None = None,
    consumer_config: Path | None = None,
) -> list[str]:
    """ConsumerPerformance's arguments: read ``messages`` records of ``topic`` from the start.

    ``timeout_ms`` is the longest gap between two polls returning records before the tool gives
    up (not a limit on the whole run). Without ``group`` the tool picks a fresh random group,
    so every run starts at the earliest offsets.
    """
    args = [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--timeout",
        str(timeout_ms),
    ]
    if group is not None:
        args += ["--group", group]
    if consumer_config is not None:
        args += ["--consumer.config", str(consumer_config)]
    return args


# --- output ----------------------------------------------------------------------------------


def parse_producer_output(stdout: str) -> ProducerPerfResult:
    """The last summary line in ProducerPerformance's stdout; :class:`KafkaPerfError` if none."""
    matches = _PRODUCER_SUMMARY.findall(stdout)
    if not matches:
        raise KafkaPerfError(f"no ProducerPerformance summary line in:\n{stdout[-2000:]}")
    sent, rate, mb, avg, mx, p50, p95, p99, p999 = matches[-1]
    return ProducerPerfResult(
        records=int(sent),
        records_per_s=float(rate),
        mb_per_s=float(mb),
        avg_latency_ms=float(avg),
        max_latency_ms=float(mx),
        p50_ms=int(p50),
        p95_ms=int(p95),
        p99_ms=int(p99),
        p999_ms=int(p999),
    )


def parse_consumer_output(stdout: str) -> ConsumerPerfResult:
    """ConsumerPerformance's header and summary row; :class:`KafkaPerfError` if they are missing.

    The row is the first line after the header that has as many fields; the timeout warning
    may sit in between.
    """
    lines = [line.strip() for line in stdout.splitlines()]
    try:
        at = next(i for i, line in enumerate(lines) if line.startswith("start.time,"))
    except StopIteration:
        raise KafkaPerfError(f"no ConsumerPerformance header in:\n{stdout[-2000:]}") from None
    header = lines[at].split(", ")
    row = next(
        (r for r in (line.split(", ") for line in lines[at + 1 :]) if len(r) == len(header)), None
    )
    if row is None:
        raise KafkaPerfError(f"no ConsumerPerformance summary row in:\n{stdout[-2000:]}")
    f = dict(zip(header, row, strict=True))
    try:
        return ConsumerPerfResult(
            start_time=f["start.time"],
            end_time=f["end.time"],
            mb=float(f["data.consumed.in.MB"]),
            mb_per_s=float(f["MB.sec"]),
            records=int(f["data.consumed.in.nMsg"]),
            records_per_s=float(f["nMsg.sec"]),
            rebalance_ms=int(f["rebalance.time.ms"]),
            fetch_ms=int(f["fetch.time.ms"]),
            fetch_mb_per_s=float(f["fetch.MB.sec"]),
            fetch_records_per_s=float(f["fetch.nMsg.sec"]),
            timed_out=_CONSUMER_TIMEOUT in stdout,
        )
    except (KeyError, ValueError) as e:
        raise KafkaPerfError(f"unexpected ConsumerPerformance summary {f}: {e}") from e


# --- running ---------------------------------------------------------------------------------


def producer_perf(
    args: Sequence[str],
    *,
    jars_dir: Path = DEFAULT_JARS_DIR,
    heap: str = DEFAULT_HEAP,
    gc: str = SERIAL_GC,
    timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
) -> ProducerPerfResult:
    """Run ProducerPerformance with ``args`` (from :func:`producer_perf_args`, which says what
    is produced) against an existing topic; ``gc`` is the JVM's collector flag.

    Raises :class:`KafkaPerfError` if the tool fails or takes longer than ``timeout_s`` seconds.
    """
    with tempfile.TemporaryDirectory(prefix="kafka-perf-") as tmp:
        out = _run(PRODUCER_MAIN, args, Path(tmp), jars_dir, heap, timeout_s, gc)
    return parse_producer_output(out)


def consumer_perf(
    bootstrap: str,
    topic: str,
    messages: int,
    *,
    timeout_ms: int = 10_000,
    group: str | None = None,
    extra_props: Mapping[str, str] | None = None,
    jars_dir: Path = DEFAULT_JARS_DIR,
    heap: str = DEFAULT_HEAP,
    timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
) -> ConsumerPerfResult:
    """Consume ``messages`` records of ``topic`` from the earliest offsets.

    ``extra_props`` are consumer configs (passed in a ``--consumer.config`` file). Check
    :attr:`ConsumerPerfResult.timed_out` / ``records``: running out of records is not an error
    here. Raises :class:`KafkaPerfError` if the tool fails or exceeds ``timeout_s`` seconds.
    """
    with tempfile.TemporaryDirectory(prefix="kafka-perf-") as tmp:
        config = None
        if extra_props:
            config = Path(tmp) / "consumer.properties"
            config.write_text("".join(f"{k}={_escape(v)}\n" for k, v in extra_props.items()))
        args = consumer_perf_args(
            bootstrap, topic, messages, timeout_ms=timeout_ms, group=group, consumer_config=config
        )
        out = _run(CONSUMER_MAIN, args, Path(tmp), jars_dir, heap, timeout_s)
    return parse_consumer_output(out)


def _run(
    main: str,
    args: Sequence[str],
    tmp: Path,
    jars_dir: Path,
    heap: str,
    timeout_s: float,
    gc: str = SERIAL_GC,
) -> str:
    log4j = tmp / "log4j.properties"
    log4j.write_text(_QUIET_LOG4J)
    cmd = jvm_command(jars_dir.resolve(), log4j, main, *args, heap=heap, gc=gc)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=tmp
        )
    except subprocess.TimeoutExpired as e:
        raise KafkaPerfError(f"{main} still running after {timeout_s:.0f} s; killed") from e
    if proc.returncode != 0:
        raise KafkaPerfError(
            f"{main} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
        )
    return proc.stdout


def _escape(value: str) -> str:
    # Java .properties treats a backslash as an escape character.
    return value.replace("\\", "\\\\")
