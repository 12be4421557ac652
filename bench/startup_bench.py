"""Start-up bench: how long a job takes from launch to its first output, and where that
time goes. The replication job (the default) is timed to its first copied record, the audit
job (``--job audit``) to its first audited batch.

Two single-broker clusters; a small source topic (a few records per partition). Each run
launches ``./spark-submit.sh`` with a continuous KAFKA_REPLICATION JobGroup of its own (new
checkpoint, new tables, new destination topic; the micro-batch copy, or with ``--low-latency``
the low-latency copy, whose tables are created beside its first epoch) and measures, from the
launch:

* ``first_record_s``: the first record in the destination topic (polled every 0.25 s);
* the job's own ``start-up:`` log line (jobs/runtime/template.py): launch to the Python
  driver's run(), broker checks, Spark session, then client checks, tables and plan.

With ``--job availability``, ``--job loadgen`` or ``--job dispatch`` each run launches a
JobGroup of that type of its own (native producer probes of the source cluster; a
LOAD_GEN_PRODUCE at 1,000 records/s into a topic of its own; a dispatcher of the source
topic to a gRPC service in this process that answers OK, `testing.dispatch_service`), each
with a 1 s trigger, and measures ``first_commit_s``: from the launch to the first micro-batch
Spark committed (the oldest ``commits/0`` under the run's checkpoint: the batch's output is
written).

With ``--job audit`` each run launches a continuous KAFKA_AUDIT JobGroup of its own (one
APPROX_UNIQ config, a new checkpoint and table of its own, from the earliest offset) on the
same source topic and measures, from the launch, ``first_batch_s``: the job's ``batch 0
folded`` log line (the first batch is audited and saved under the checkpoint), and
``first_counts_s``: its ``audit_counts: batch 0 merged`` line (the counts are readable); log
lines carry milliseconds.

The job is then stopped. Runs are sequential; the figures are the median and every run. The
1-minute load average before each run goes into the result file: start-up is CPU-bound, so
compare figures only between runs at similar load.

With ``--cds both`` (the default when the archive of ``make build`` exists) the runs alternate
between the driver started from the class-data sharing archive and without it (``UATU_CDS=0``),
in the order on, off, off, on (repeated), so a trend in the machine's load falls on both alike;
the medians and the ratio off / on are printed per phase.

    PYTHONPATH=$PWD:$PWD/build/gen .venv/bin/python -m bench.startup_bench [--runs 4] [--cds both]
        [--job replication|audit|availability|loadgen|dispatch]
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from bench._common import (
    BENCH_DIR,
    bench_parser,
    median_or_none,
    parse_args,
    say,
    warn_if_jobs_zip_stale,
    work_dir,
    write_latest,
    write_result,
)
from bench.replication_bench import (
    POLL_S,
    Bench,
    RecordCounter,
    job_group,
    produce_backlog,
    spark_job,
    spark_log,
)
from core.paths import SPARK_CDS_ARCHIVE
from core.processes import signal_group
from devservices.kafka import start_cluster
from testing.conf import write_conf_dir
from testing.dispatch_service import ScriptedService
from testing.jobgroups import audit_group
from testing.topic_data import Record, produce_records

SOURCE_TOPIC = "startup-source"
JOB_TYPES = {
    "replication": "KAFKA_REPLICATION",
    "audit": "KAFKA_AUDIT",
    "availability": "KAFKA_AVAILABILITY",
    "loadgen": "LOAD_GEN_PRODUCE",
    "dispatch": "KAFKA_CONSUMER_TO_RPC_DISPATCHER",
}
PHASES = re.compile(
    r"start-up: (?:launch to run\(\) (?P<to_run>[\d.]+) s, )?broker checks (?P<checks>[\d.]+) s, "
    r"Spark session (?P<session>[\d.]+) s, client checks, tables and plan (?P<tables>[\d.]+) s"
)


def start_up_phases(log_text: str) -> dict[str, float]:
    """The seconds of each phase from the job's ``start-up:`` line; {} if it has none."""
    match = PHASES.search(log_text)
    if match is None:
        return {}
    return {k: float(v) for k, v in match.groupdict().items() if v is not None}


PHASE_NAMES = ("to_run", "checks", "session", "tables")
CDS_ORDER = (True, False, False, True)  # on, off, off, on, then again


def cds_for_run(mode: str, index: int) -> bool:
    """Whether run `index` starts its driver from the CDS archive, for --cds on/off/both."""
    if mode == "both":
        return CDS_ORDER[index % len(CDS_ORDER)]
    return mode == "on"


FIRSTS = ("first_record_s", "first_batch_s", "first_counts_s", "first_commit_s")
LOG_LINE_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.M)


def startup_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of launch to the first output (record, batch, counts) and of each phase over
    `runs`."""
    figures: dict[str, Any] = {}
    for first in FIRSTS:
        values = [r[first] for r in runs if first in r]
        if values:
            figures[f"launch_to_{first}_median"] = median_or_none(values)
    for phase in PHASE_NAMES:
        figures[f"{phase}_s_median"] = median_or_none([r[phase] for r in runs if phase in r])
    return figures


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a running job as an operator would (SIGTERM: spark-submit.sh turns it into the stop
    file); SIGKILL its process group if it has not ended two minutes later."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)


def timed_run(
    b: Bench,
    group: dict[str, Any],
    timeout_s: float,
    poll: Callable[[dict[str, Any], float], bool],
) -> dict[str, Any]:
    """Launch `group`, then every POLL_S call `poll(run, launched_at)` (epoch seconds), which
    records the first outputs it finds in `run` and returns True once it has them all; stop
    the job then, or when it exits or `timeout_s` passes. `run` also gets the 1-minute load
    at the launch and the phases of the job's start-up line."""
    run: dict[str, Any] = {"load_1min": os.getloadavg()[0]}
    launched, launched_at = time.monotonic(), time.time()
    with spark_job(b, group) as proc:
        while time.monotonic() - launched < timeout_s and proc.poll() is None:
            if poll(run, launched_at):
                break
            time.sleep(POLL_S)
        stop(proc)
    run.update(start_up_phases(spark_log(group["jobGroupId"]).read_text(errors="replace")))
    return run


def one_run(b: Bench, index: int, timeout_s: float, low_latency: bool) -> dict[str, Any]:
    name = f"startup-{index}"
    destination = f"startup-copy-{index}"
    b.destination.create_topic(destination, b.partitions, 1)
    group = job_group(name, SOURCE_TOPIC, destination, b, continuous=True, low_latency=low_latency)
    counter = RecordCounter(b.destination.bootstrap_servers, destination, b.partitions)

    def first_record(run: dict[str, Any], launched_at: float) -> bool:
        if counter.count():
            run["first_record_s"] = round(time.time() - launched_at, 2)
        return "first_record_s" in run

    try:
        return timed_run(b, group, timeout_s, first_record)
    finally:
        counter.close()


def seconds_after(log_text: str, marker: str, launched_at: float) -> float | None:
    """Seconds from `launched_at` (epoch) to the first log line containing `marker`."""
    for match in LOG_LINE_TIME.finditer(log_text):
        end = log_text.find("\n", match.end())
        if marker in log_text[match.end() : end if end >= 0 else None]:
            stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return round(stamp - launched_at, 2)
    return None


def one_audit_run(b: Bench, index: int, timeout_s: float) -> dict[str, Any]:
    name = f"startup-audit-{index}"
    group = json_format.MessageToDict(
        audit_group(name, SOURCE_TOPIC, trigger_seconds=None, from_earliest=True)
    )
    # A table of its own, as each replication run has: a new table is created beside the
    # first batch, an existing one is checked before the query (a different start-up).
    group["extension"] = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "output": {"auditCountsPath": str(b.workdir / "wh" / name / "audit_counts")},
    }
    markers = {
        "first_batch_s": "uatu.audit: batch 0 folded",
        "first_counts_s": "audit_counts: batch 0 written",
    }

    def first_lines(run: dict[str, Any], launched_at: float) -> bool:
        text = spark_log(name).read_text(errors="replace")
        for key, marker in markers.items():
            if key not in run and (at := seconds_after(text, marker, launched_at)) is not None:
                run[key] = at
        return all(key in run for key in markers)

    return timed_run(b, group, timeout_s, first_lines)


DISPATCH_TOPIC = "startup-dispatch"
# Micro-batch job types timed to their first committed batch (one_committed_run).
COMMITTED_JOBS = ("availability", "loadgen", "dispatch")


def committed_group(job: str, name: str, service_address: str) -> dict[str, Any]:
    """A JobGroup of type `job` (one of COMMITTED_JOBS) with a 1 s trigger."""
    options: dict[str, Any] = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "trigger": {"intervalSeconds": 1},
    }
    if job == "availability":
        return {
            "jobGroupId": name,
            "type": "JOB_TYPE_KAFKA_AVAILABILITY",
            "kafkaConsumerTaskGroup": {"cluster": "local", "topic": f"{name}-probe"},
            "availabilityTaskGroup": {
                "availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"
            },
            "extension": options,
        }
    if job == "loadgen":
        return {
            "jobGroupId": name,
            "type": "JOB_TYPE_LOAD_GEN_PRODUCE",
            "flowControl": {"messagesPerSec": 1000},
            "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": f"{name}-load"},
            "extension": {**options, "loadgen": {"seed": 7}},
        }
    return {
        "jobGroupId": name,
        "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": DISPATCH_TOPIC,
            "consumerGroup": f"{name}-svc",
            "autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_EARLIEST",
        },
        "rpcDispatcherTaskGroup": {
            "uri": f"dns:///{service_address}",
            "procedure": f"kafka.consumerproxy.{name}-svc/{DISPATCH_TOPIC}",
            "rpcTimeoutMs": 1000,
            "dlqTopic": f"{name}-dlq",
        },
        "extension": options,
    }


def first_commit_at(checkpoints: Path) -> float | None:
    """Epoch seconds of the oldest batch-0 commit under `checkpoints` (any of a job's
    queries); None before there is one."""
    times = [p.stat().st_mtime for p in checkpoints.glob("**/commits/0")]
    return min(times) if times else None


def one_committed_run(
    b: Bench, index: int, timeout_s: float, job: str, service_address: str
) -> dict[str, Any]:
    name = f"startup-{job}-{index}"
    # The topic each job type needs of its own: probes, load, the dispatcher's DLQ.
    suffix = {"availability": "probe", "loadgen": "load", "dispatch": "dlq"}[job]
    b.source.create_topic(f"{name}-{suffix}", b.partitions, 1)
    group = committed_group(job, name, service_address)
    # Each job type writes its checkpoints under <checkpoints>/<jobGroupId>.
    checkpoints = b.workdir / "ck" / name

    def first_commit(run: dict[str, Any], launched_at: float) -> bool:
        if (at := first_commit_at(checkpoints)) is not None:
            run["first_commit_s"] = round(at - launched_at, 2)
        return "first_commit_s" in run

    return timed_run(b, group, timeout_s, first_commit)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.startup_bench", __doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    parser.add_argument(
        "--job",
        choices=("replication", "audit", *COMMITTED_JOBS),
        default="replication",
        help="the job type to start (default replication)",
    )
    parser.add_argument(
        "--low-latency",
        action="store_true",
        help="run the low-latency copy (extension.replication.low_latency) instead of the "
        "micro-batch copy",
    )
    parser.add_argument(
        "--cds",
        choices=("on", "off", "both"),
        default="both" if SPARK_CDS_ARCHIVE.exists() else "off",
        help="start drivers from the class-data sharing archive (make build): on, off, or "
        "alternating (default when the archive exists)",
    )
    args = parse_args(parser, argv, {"runs": 1})
    if args.cds != "off" and not SPARK_CDS_ARCHIVE.exists():
        parser.error(f"--cds {args.cds}: {SPARK_CDS_ARCHIVE} is missing; run `make build`")
    warn_if_jobs_zip_stale()
    runs: list[dict[str, Any]] = []
    with work_dir("startup-") as workdir, ExitStack() as stack:
        say("starting two single-broker clusters")
        src = stack.enter_context(start_cluster(workdir / "kafka-source", heap="1g"))
        dst = stack.enter_context(start_cluster(workdir / "kafka-destination", heap="1g"))
        b = Bench(workdir, src, dst, args.partitions, 100)
        b.conf = write_conf_dir(
            workdir / "conf",
            src.bootstrap_servers,
            workdir / "wh",
            workdir / "ck",
            more_clusters={
                "src": {"bootstrap_servers": src.bootstrap_servers},
                "dst": {"bootstrap_servers": dst.bootstrap_servers},
            },
        )
        src.create_topic(SOURCE_TOPIC, args.partitions, 1)
        produce_backlog(
            src.bootstrap_servers, SOURCE_TOPIC, 10 * args.partitions, 100, args.partitions
        )
        service_address = ""
        if args.job == "dispatch":
            service = stack.enter_context(ScriptedService())
            service_address = service.address
            src.create_topic(DISPATCH_TOPIC, args.partitions, 1)
            produce_records(
                src.bootstrap_servers,
                DISPATCH_TOPIC,
                (Record(i % args.partitions, None, f"r{i}|ok".encode(), 0) for i in range(100)),
            )
        for i in range(args.runs):
            cds = cds_for_run(args.cds, i)
            os.environ["UATU_CDS"] = "1" if cds else "0"  # spark-submit.sh reads it
            if args.job == "audit":
                run = {"cds": cds, **one_audit_run(b, i, args.timeout)}
            elif args.job in COMMITTED_JOBS:
                run = {
                    "cds": cds,
                    **one_committed_run(b, i, args.timeout, args.job, service_address),
                }
            else:
                run = {"cds": cds, **one_run(b, i, args.timeout, args.low_latency)}
            say(f"run {i}: {run}")
            runs.append(run)
    figures: dict[str, Any] = {
        "job_type": JOB_TYPES[args.job],
        **(
            {"copy": "low-latency" if args.low_latency else "micro-batch"}
            if args.job == "replication"
            else {}
        ),
        **startup_medians(runs),
    }
    figures["runs"] = runs
    if args.cds == "both":
        on = startup_medians([r for r in runs if r["cds"]])
        off = startup_medians([r for r in runs if not r["cds"]])
        figures["cds_on"], figures["cds_off"] = on, off
        for key, value in on.items():
            ratio = off[key] / value if value and off[key] is not None else None
            say(f"{key}: CDS on {value}, off {off[key]}, off / on {ratio and round(ratio, 2)}")
    write_latest(BENCH_DIR / "startup-result.json", figures)
    path = write_result("startup", figures, args)
    first = {"audit": "first_batch_s", "replication": "first_record_s"}.get(
        args.job, "first_commit_s"
    )
    say(
        f"launch to {first[:-2].replace('_', ' ')}, "
        f"median {figures.get(f'launch_to_{first}_median')} s; {path}"
    )
    return 0 if all(first in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
