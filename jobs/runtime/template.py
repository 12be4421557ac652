"""The shape every job's run has: checks -> session -> tables -> query -> close.

`StreamingJob.run` is that sequence, written once. A job's entry module
(`jobs/<type>/job.py`) subclasses it and fills in only what is its own: the stream it reads,
the function that writes each micro-batch, its tables, and optional hooks (broker checks
before any Spark work, work between the tables and the query, extra session settings,
cleanup). `jobs/main.py` builds the job from its validated spec and calls `run`.

Metrics: with `UATU_METRICS_PORT` set, the driver serves Prometheus metrics for the run
(`jobs/runtime/metrics.py`); every session gets Spark's streaming metrics and its
PrometheusServlet.

Exit status: whatever `runner.run_query` returns (0 finished or stopped, 1 failed), or the
status `before_query` returns to finish without starting a query. A failed query whose cause
the job can name (`explain_failure`) raises that UatuError instead: `jobs/main.py` prints its
one line and exits with its status.

`--skip-lost-records` (a run's `skip_lost_records`): just before the query starts, the job
records the source records lost before this start and reads past exactly those
(`skip_lost_records`, `jobs/runtime/source_failure.py`).
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pyspark.sql import DataFrame, SparkSession
from uber.data.kafka.datatransfer.job_pb2 import FlowControl

from core.errors import EXIT_FAILED, ConfigError, UatuError
from core.spec import JobSpec
from jobs.runtime.checkpoint_files import query_id
from jobs.runtime.metrics import SESSION_CONF, QueryMetricsListener, ui_port_of
from jobs.runtime.metrics import start as start_metrics
from jobs.runtime.reporting import Reporting
from jobs.runtime.runner import BatchWriter, QuerySettings, run_query
from jobs.runtime.session import build_session, listening

log = logging.getLogger("uatu.template")

# Set by spark-submit.sh (epoch seconds) so the start-up line can count from the launch.
LAUNCHED_AT = "UATU_LAUNCHED_AT"

S = TypeVar("S", bound=JobSpec)


class WriteId:
    """The idempotent-write id (Delta's txnAppId) of one query's writes,
    "<prefix>-<query id>": the query id its checkpoint keeps across restarts, so a batch
    replayed after a crash carries the id it was first written with and is skipped. Read on
    first use (the checkpoint's metadata exists once the query has started), then kept."""

    def __init__(self, prefix: str, checkpoint: str) -> None:
        self.prefix = prefix
        self.checkpoint = checkpoint
        self._value: str | None = None

    def of(self, spark: SparkSession) -> str:
        if self._value is None:
            self._value = f"{self.prefix}-{query_id(spark, self.checkpoint)}"
        return self._value


@dataclass(frozen=True)
class Packing:
    """How a worker application runs a spec with others of its key in one query, a *pack*
    (jobs/worker/packer.py). A job type that packs returns one from `StreamingJob.packing`."""

    key: str  # the specs of one key may share a query
    item: str  # what one pack holds once: two specs of one item go to two packs
    # (session, member specs, the site's checkpoint root, the pack's name) -> the pack's spec
    form: Callable[[SparkSession, Sequence[Any], str, str], Any]
    query_name: Callable[[str], str]  # the pack's query name, from the pack's name
    job: Callable[[Any], StreamingJob[Any]]  # the job that runs a pack's spec


class StreamingJob(ABC, Generic[S]):
    """One run of one JobGroup's streaming query."""

    # Spark settings this job needs on top of jobs.runtime.session.BASE_CONF. A worker's one
    # session carries every job type's (jobs/worker/main.py, `worker_conf`).
    session_conf: ClassVar[Mapping[str, str]] = {}
    # SQL settings only this job's query runs with (runner.QuerySettings.conf): set on the
    # session while the query starts, so on a worker the other groups' queries keep the
    # session's.
    query_conf: ClassVar[Mapping[str, str]] = {}
    # The first part of this job type's idempotent-write ids (`write_id`). Never change it:
    # a batch replayed after the change would carry a new id and be written twice.
    write_id_prefix: ClassVar[str] = "uatu"

    def __init__(self, spec: S) -> None:
        self.spec = spec

    def write_id(self, checkpoint: str | None = None) -> WriteId:
        """The idempotent-write id of the query at `checkpoint` (the job's own by default)."""
        return WriteId(self.write_id_prefix, checkpoint or self.spec.output.checkpoint)

    # --- before any Spark work ----------------------------------------------------------

    def ensure_source(self) -> None:
        """Make the source topic exist if the broker creates it on demand (default: nothing)."""

    def check(self) -> None:
        """Broker checks beyond the source topic's existence; raise a UatuError to refuse.

        Run by `--check` and at the start of `run`.
        """

    def check_session(self, spark: SparkSession) -> None:
        """Checks that need the JVM (e.g. building the Java clients), before anything is
        written; raise a UatuError to refuse."""

    @classmethod
    def warm_up(cls, spark: SparkSession) -> None:
        """Load what the job type's first start in a JVM would (its clients' classes), before
        a worker application takes groups (`jobs.runtime.warm_up.warm_up_job_types`); nothing
        by default. Leaves nothing open; may raise, and the worker starts anyway."""

    # --- the job's own parts ------------------------------------------------------------

    @abstractmethod
    def ensure_tables(self, spark: SparkSession) -> None:
        """Create the job's Delta tables if they do not exist."""

    @abstractmethod
    def stream(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame the query reads."""

    @abstractmethod
    def batch_writer(self, spark: SparkSession) -> BatchWriter:
        """The foreachBatch function that writes one micro-batch (exactly once)."""

    def before_query(self, spark: SparkSession) -> int | None:
        """Work between the tables and the query; an int ends the run with that status."""
        return None

    def query_settings(self, *, once: bool, stop_file: str | None) -> QuerySettings:
        return QuerySettings(
            name=self.spec.query_name,
            checkpoint=self.spec.output.checkpoint,
            once=once,
            trigger_interval_seconds=self.spec.trigger_interval_seconds,
            stop_file=stop_file,
            conf=self.query_conf,
        )

    def skip_lost_records(self, spark: SparkSession, *, once: bool) -> None:
        """`--skip-lost-records`, before the query starts: record the source records deleted
        before the job read them and let this run read past exactly those
        (`jobs/runtime/source_failure.skip_lost`); `once` is the run's (it decides how the
        replication job reads). A job type that can overrides it; `jobs/main.py` refuses the
        flag before any Spark work for the others (`skips_lost_records`)."""
        raise ConfigError(
            "--skip-lost-records", f"{type(self).__name__} does not skip lost records"
        )

    @property
    def skips_lost_records(self) -> bool:
        """Whether the job reads past lost source records: it overrides `skip_lost_records`."""
        return type(self).skip_lost_records is not StreamingJob.skip_lost_records

    @classmethod
    def packing(cls, spec: S) -> Packing | None:
        """How a worker may run `spec` in one query with others (a pack); None, the default:
        it runs as a query of its own."""
        return None

    @classmethod
    def alone_spec(cls, spark: SparkSession, spec: S, checkpoints: str) -> S:
        """The spec a worker runs `spec` by when it does not pack (`packing` None), under
        `checkpoints` (the site's checkpoint root): `spec` itself, the default. A job type that
        packs says where a group that left its pack goes on (its own checkpoint is stale)."""
        return spec

    def retune(self, flow: FlowControl) -> bool:
        """New flow control for the running query, from its next micro-batch: True when the
        job applied it in place, False when the query must restart for it (the default; a job
        type that can apply it overrides this). Called from another thread than the query's
        (a worker's heartbeats, jobs/worker/runs.py)."""
        return False

    def explain_failure(self, spark: SparkSession) -> UatuError | None:
        """After the query failed: a one-line error naming the cause when the job can tell
        it (a Kafka source's deleted topic or lost records, `jobs/runtime/source_failure.py`);
        None leaves the failure as it is (exit 1, Spark's exception in the log)."""
        return None

    def run_stream(
        self, spark: SparkSession, *, once: bool, stop_file: str | None, reporting: Reporting | None
    ) -> int:
        """Run the job's query to its end: by default a foreachBatch query of `stream` with
        `batch_writer` (`runner.run_query`). A job that moves its records without Spark's
        micro-batch engine (the continuous replication copy) runs its own loop instead."""
        writer = self.batch_writer(spark)
        settings = self.query_settings(once=once, stop_file=stop_file)
        return run_query(self.stream(spark), writer, settings, reporting)

    def close(self) -> None:
        """Release what the job opened (clients, threads); called once, after the query."""

    # --- the template -------------------------------------------------------------------

    def run(
        self,
        *,
        once: bool,
        stop_file: str | None = None,
        reporting: Reporting | None = None,
        skip_lost_records: bool = False,
    ) -> int:
        """Check, build the session and tables, run the query to its end, close. With
        `skip_lost_records`, the records of the source lost before this start are recorded and
        skipped (`skip_lost_records`) just before the query starts."""
        began = time.time()
        self.check()
        checked = time.time()
        spark = build_session(self.spec.query_name, conf={**SESSION_CONF, **self.session_conf})
        session_built = time.time()
        endpoint = start_metrics(
            os.environ, self.spec.job_group_id, ui_port_of(spark.sparkContext.uiWebUrl)
        )
        listeners = () if endpoint is None else (QueryMetricsListener(self.spec.query_name),)
        try:
            with listening(spark, *listeners):
                return self.run_on(
                    spark,
                    once=once,
                    stop_file=stop_file,
                    reporting=reporting,
                    skip_lost_records=skip_lost_records,
                    timings=(began, checked, session_built),
                )
        finally:
            if endpoint is not None:
                endpoint.stop()

    def run_on(
        self,
        spark: SparkSession,
        *,
        once: bool,
        stop_file: str | None = None,
        reporting: Reporting | None = None,
        skip_lost_records: bool = False,
        timings: tuple[float, float, float] | None = None,
    ) -> int:
        """The run after the session: tables, the query to its end, close. A worker
        application (`jobs/worker/`) calls it for each of its JobGroups, in one session, from
        the group's own thread (`check` is the caller's: `run` does it first). `timings`
        (began, checked, session built) are `run`'s, for the start-up line."""
        began, checked, session_built = timings or (time.time(),) * 3
        launched = os.environ.get(LAUNCHED_AT, "") if timings else ""
        try:
            self.check_session(spark)
            clients_checked = time.time()
            self.ensure_tables(spark)
            tables_ensured = time.time()
            finished = self.before_query(spark)
            ready = (clients_checked, tables_ensured, time.time())
            _log_start_up(launched, began, checked, session_built, ready)
            if finished is not None:
                return finished
            if skip_lost_records:
                self.skip_lost_records(spark, once=once)
            status = self.run_stream(spark, once=once, stop_file=stop_file, reporting=reporting)
            if status == EXIT_FAILED:
                cause = self.explain_failure(spark)
                if cause is not None:
                    raise cause
            return status
        finally:
            self.close()


def _log_start_up(
    launched: str,
    began: float,
    checked: float,
    session_built: float,
    ready: tuple[float, float, float],
) -> None:
    """One line saying where the start-up went, up to the query's start (the start-up
    bench reads it); `launched` is the application's launch time, "" for a query started in
    an application that was already running (a worker's); `ready`: when the clients were
    checked, the tables ensured and the job ready for its query."""
    try:
        before = f"launch to run() {began - float(launched):.2f} s, "
    except ValueError:
        before = ""
    clients_checked, tables_ensured, prepared = ready
    log.info(
        "start-up: %sbroker checks %.2f s, Spark session %.2f s, client checks, tables and "
        "plan %.2f s (client checks %.2f s, tables %.2f s, before the query %.2f s)",
        before,
        checked - began,
        session_built - checked,
        prepared - session_built,
        clients_checked - session_built,
        tables_ensured - clients_checked,
        prepared - tables_ensured,
    )
