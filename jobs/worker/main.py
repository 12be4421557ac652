"""A worker application: `spark-submit.sh worker`. One long-running Spark application that
registers with the control plane (RegisterWorker) and runs the JobGroups it is assigned, each
as its own streaming query in one SparkSession (jobs/worker/runs.py), as uForwarder's
workers run the jobs their master assigns; the groups of a job type that packs (audits: one
cluster and configuration) share one query per pack (jobs/worker/packer.py). Assignment,
update and removal arrive as the commands of the heartbeat replies (RUN, UPDATE, CANCEL);
every heartbeat carries one status per group.

It needs the control plane: `UATU_CONTROL_PLANE` (and, when the control plane launched it,
`UATU_WORKER_ID` and `UATU_WORKER_SECRET`; jobs/runtime/reporting.py reads them all).

Fencing: when no heartbeat has been answered for `UATU_WORKER_FENCE_SECONDS` (the control
plane sets it below its lease), the worker stops every query it runs, from a thread of its
own, so a stuck heartbeat cannot keep it running. The control plane moves a worker's groups
only after its lease expired, so by then the worker has stopped them: a group never runs in
two places. The control plane starts them again here when heartbeats are answered again and
it still assigns them here.

Exit status: 0 stopped (SIGTERM, SIGINT or the stop file), 2 bad configuration.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2

from core import faults
from core.config import Settings, add_conf_dir_argument, load_settings
from core.errors import ConfigError, UatuError
from core.processes import CpuMeter
from jobs import registry
from jobs.prepare import build_job, check_source
from jobs.runtime import ensured_tables, produced
from jobs.runtime.after_commit import WRITES_POOL
from jobs.runtime.metrics import SESSION_CONF, ui_port_of
from jobs.runtime.metrics import start as start_metrics
from jobs.runtime.progress import JobIdentity
from jobs.runtime.reporting import ControlPlaneLink, ReporterConfig
from jobs.runtime.runner import StopRequests
from jobs.runtime.session import build_session, listening
from jobs.runtime.template import StreamingJob
from jobs.runtime.warm_up import warm_up_delta, warm_up_job_types
from jobs.worker.events import QueryEvents
from jobs.worker.packer import Packer
from jobs.worker.runs import GroupRuns

log = logging.getLogger("uatu.worker")

FENCE_ENV = "UATU_WORKER_FENCE_SECONDS"

# On top of the jobs' own: every group's Spark jobs go to a FAIR pool of its own.
POOL_CONF = {
    "spark.scheduler.mode": "FAIR",
    # A second attempt of a dispatch task would call the service again for the same records.
    "spark.speculation": "false",
}


# The after-commit writes' pool (jobs/runtime/after_commit.py), declared: a group's pool has
# weight 1 and no minimum share, so among a hundred groups' pools the writes would have a
# hundredth of the task slots, and the rows users query would wait behind every query's next
# batch. With a minimum share of two Spark's FAIR scheduler offers a free slot to a pending
# write before any query's task until two writes run. A local worker has at least four task
# slots (spark-submit.sh), so the queries' batches keep two of them however many writes wait.
WRITES_POOL_WEIGHT = 4
WRITES_POOL_MIN_SHARE = 2


def pools_xml() -> str:
    """The worker's FAIR allocation file: the after-commit writes' pool; the groups' and
    packs' pools are made by Spark as they are first used, each weight 1, minimum share 0."""
    return (
        '<?xml version="1.0"?>\n<allocations>\n'
        f'  <pool name="{WRITES_POOL}">\n'
        "    <schedulingMode>FIFO</schedulingMode>\n"
        f"    <weight>{WRITES_POOL_WEIGHT}</weight>\n"
        f"    <minShare>{WRITES_POOL_MIN_SHARE}</minShare>\n"
        "  </pool>\n</allocations>\n"
    )


def write_pools_file(folder: str) -> str:
    """`pools_xml()` written to a file in `folder`; its path."""
    path = Path(folder) / "fairscheduler.xml"
    path.write_text(pools_xml())
    return str(path)


def worker_conf(pools_file: str) -> dict[str, str]:
    """The worker session's conf: the jobs' metrics conf, every JobType's `session_conf` (the
    worker may run any of them in this one session), and the FAIR pools with `pools_file`
    (write_pools_file) for their allocation file. A key two job types set differently
    (`spark.sql.shuffle.partitions`, a query's choice at its first run) stays at the session's
    default. A job type's `query_conf` is not here: its query starts with it (the
    availability job's consumer-based offset reader, which the others do without)."""
    merged: dict[str, str] = {}
    differing: set[str] = set()
    for runtime in registry.every_runtime():
        for key, value in runtime.session_conf.items():
            if merged.setdefault(key, value) != value:
                differing.add(key)
    shared = {key: value for key, value in merged.items() if key not in differing}
    pools = {**POOL_CONF, "spark.scheduler.allocation.file": pools_file}
    return {**SESSION_CONF, **shared, **pools}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="spark-submit.sh worker",
        description="Run the JobGroups the control plane assigns to this application, each "
        "as its own streaming query in one SparkSession (docs/controlplane.md, Worker pool).",
    )
    add_conf_dir_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        settings = load_settings(args.conf_dir)
        config = ReporterConfig.from_env(os.environ)
        if config is None:
            raise ConfigError(
                "UATU_CONTROL_PLANE", "unset; a worker runs what the control plane assigns to it"
            )
        fence_seconds = _fence_seconds(os.environ)
        faults.parse(os.environ.get(faults.ENV, ""))  # a bad UATU_FAULT: exit 2
    except UatuError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status
    pools_file = write_pools_file(tempfile.mkdtemp(prefix="uatu-worker-"))
    spark = build_session("uatu-worker", conf=worker_conf(pools_file))
    ui_port = ui_port_of(spark.sparkContext.uiWebUrl)
    link = ControlPlaneLink(config, ui_port or 0)
    # Every group's job series, from this one driver (the control plane's launchers set
    # UATU_METRICS_PORT, and UATU_METRICS_SD_DIR where its /sd can read the target file).
    worker = str(config.worker_id)
    endpoint = start_metrics(os.environ, f"worker-{worker}", ui_port, {"worker": worker})
    packer = packer_on(spark, settings)
    runs = GroupRuns(
        lambda job, stop_file: _run_group(spark, settings, job, stop_file, events, runs, packer),
        traffic=lambda group_id: events.traffic(group_id),
    )
    # The worker's one listener (the lambdas above run later). The application's CPU is its
    # driver's process tree: spark-submit's JVM is this Python process's parent.
    events = QueryEvents(runs, CpuMeter(os.getppid()).cores, packer=packer)
    log.info(
        "worker application up; fenced after %.0f s without an answered heartbeat", fence_seconds
    )
    # Before registering: the control plane places groups here once their first Delta
    # writes and clients no longer pay the JVM's first-use cost.
    warm_up_delta(spark, settings.checkpoints)
    warm_up_job_types(spark, registry.every_runtime())
    try:
        # Many groups' start-ups ensure the same few tables: each is checked once here.
        with (
            listening(spark, events),
            ensured_tables.remembering(),
            StopRequests(os.environ.get("UATU_STOP_FILE")) as stop,
        ):
            serve_commands(link, runs, fence_seconds, config.interval_seconds, stop.reason)
    finally:
        if endpoint is not None:
            endpoint.stop()
    return 0


def serve_commands(
    link: ControlPlaneLink,
    runs: GroupRuns,
    fence_seconds: float,
    interval_seconds: float,
    stop_reason: Callable[[], str | None],
) -> None:
    """The worker's life: heartbeat every `interval_seconds`, and at once when a group's run
    ended, and take the reply's commands until `stop_reason()` names one, with the fence
    watching from a thread of its own; then stop every query and tell the control plane so.
    Commands that arrive after a silence longer than the fence are dropped: the control
    plane may have moved those groups."""
    stopped = threading.Event()
    fence = threading.Thread(
        target=_fence, args=(link, runs, fence_seconds, stopped), name="uatu-fence", daemon=True
    )
    fence.start()
    scope = str(link.config.worker_id)  # UATU_FAULT=worker.heartbeat/<id>: one worker's drill
    try:
        while (reason := stop_reason()) is None:
            faults.fault_point("worker.heartbeat", scope)
            runs.ended.clear()  # a run that ends from here on is told by the next beat
            commands = link.beat(runs.statuses())
            if time.monotonic() - link.last_success <= fence_seconds:
                runs.take(commands)
            runs.ended.wait(interval_seconds)  # or sooner, when a run ended
        log.info("received %s; stopping the worker", reason)
    finally:
        stopped.set()
        runs.stop_all("the worker is stopping")
        runs.wait_stopped(120)
        link.beat(runs.statuses())  # the last word: every group stopped


def _run_group(
    spark: SparkSession,
    settings: Settings,
    job: WorkerJob,
    stop_file: str,
    events: QueryEvents,
    runs: GroupRuns,
    packer: Packer,
) -> int:
    """Run one group's query to its end in this thread, in the group's FAIR pool; a
    flow-control UPDATE meanwhile goes to its job's `retune`. A group that packs runs in its
    pack's query instead (jobs/worker/packer.py), this thread waiting until it is stopped."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", job.job_group_id)
    group = job.job_group
    streaming_job = build_job(group, settings)
    check_source(streaming_job, group, settings)
    packing = type(streaming_job).packing(streaming_job.spec)
    if packing is None:  # a group that left its pack goes on where it ended there
        alone = type(streaming_job).alone_spec(spark, streaming_job.spec, settings.checkpoints)
        if alone is not streaming_job.spec:
            streaming_job = type(streaming_job)(alone)
    streaming_job.check()
    source = group.kafka_consumer_task_group
    identity = JobIdentity(group.type, source.cluster, source.topic, source.consumer_group)
    watched: list[str] = []
    produced_from = produced.total(job.job_group_id)  # what it produced before this run

    def watch(query_name: str, *, packed: bool = True) -> None:
        """Follow the group's query, and no longer the query it ran in before (a pack's fold
        moves a group from one pack's query to another's)."""
        for previous in watched:
            events.unwatch(previous, job.job_group_id)
        produces = group.type == job_pb2.JOB_TYPE_KAFKA_REPLICATION  # the copy: one record each
        events.watch(
            query_name,
            job.job_group_id,
            identity,
            produces=produces,
            packed=packed,
            produced_from=produced_from,
        )
        watched[:] = [query_name]

    try:
        if packing is not None:
            return packer.run(
                packing,
                streaming_job.spec,
                stop_file,
                joined=watch,
                stopped=lambda: runs.note_stopped(job.job_group_id),
            )
        watch(streaming_job.spec.query_name, packed=False)
        runs.attach(job.job_group_id, streaming_job.retune)
        return streaming_job.run_on(spark, once=False, stop_file=stop_file)
    finally:
        for query_name in watched:
            events.unwatch(query_name, job.job_group_id)


def packer_on(spark: SparkSession, settings: Settings) -> Packer:
    """The worker's packs, on its session and the site's checkpoints."""
    return Packer(
        lambda packing, members, name: packing.form(spark, members, settings.checkpoints, name),
        lambda packing, spec, stop_file: _run_pack(spark, packing.job(spec), stop_file),
        Path(tempfile.mkdtemp(prefix="uatu-packs-")),
        committed=lambda query_name: _committed_a_batch(spark, query_name),
    )


def _committed_a_batch(spark: SparkSession, query_name: str) -> bool:
    """Whether the query of that name running now has completed a micro-batch."""
    for query in spark.streams.active:
        if query.name == query_name:
            progress = query.lastProgress
            return progress is not None and progress.batchId >= 0
    return False


def _run_pack(spark: SparkSession, job: StreamingJob, stop_file: str) -> int:
    """A pack's checks, then its query until its stop file appears, in the pack's FAIR pool
    (its members' own checks ran in their runs)."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", job.spec.job_group_id)
    job.check()
    return job.run_on(spark, once=False, stop_file=stop_file)


def _fence(
    link: ControlPlaneLink, runs: GroupRuns, seconds: float, stopped: threading.Event
) -> None:
    """Stop every query once no heartbeat has been answered for `seconds`."""
    fenced = False
    while not stopped.wait(min(1.0, seconds / 4)):  # well within the fence
        silent = time.monotonic() - link.last_success
        if silent > seconds and not fenced:
            runs.stop_all(f"no heartbeat answered for {silent:.0f} s (fenced)")
        fenced = silent > seconds


def _fence_seconds(env: dict[str, str] | os._Environ[str]) -> float:
    raw = env.get(FENCE_ENV, "30")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(FENCE_ENV, f"{raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(FENCE_ENV, f"{raw!r} must be above 0")
    return value
