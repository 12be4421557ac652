"""The worker application's one streaming-query listener: what each group's query reports.

Spark calls every listener for every query's events, so the worker registers one, which routes
by query name (a termination event names the query by id only: the start event's name is
kept): a group's progress goes to its `ProgressListener` (jobs/runtime/progress.py), whose
per-partition statuses become the group's rates and offsets in the worker's heartbeats
(`traffic`, summed over the partitions); the Spark run id of a group's query when it starts,
and a failure's one line, go to the group's run (`GroupRuns.note_started`, `note_failure`).

A query's start and its stop without failure also go to the worker's packs
(`Packer.query_started`, `query_ended`: a pack member's run is told when the query that ran it
stopped), and the stop of a group's last query to the group's run (`GroupRuns.note_stopped`:
a group asked to stop reports its query stopped while its last writes go on).

Beside offsets and rates, a group's traffic carries what uForwarder's heartbeats do where
Spark can tell it:

* `cpu_usage`: the cores the worker application uses (its driver's process tree: in local
  mode the executors too; on a cluster, executors elsewhere are not counted), shared out by
  each group's part of the time its queries spent in micro-batches over the last `window`
  seconds;
* `num_records_produced` (KafkaDispatcherTaskStatus), for a group that writes what it reads
  to Kafka (a replication): the records its batches copied since this run started, as its job
  counts them (jobs/runtime/produced.py), whether it runs alone or in a pack.

In-flight counts stay 0: a micro-batch's records are known only once it has committed them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from uber.data.kafka.datatransfer.job_status_pb2 import (
    JobStatus,
    KafkaConsumerTaskStatus,
    KafkaDispatcherTaskStatus,
)

from jobs.runtime import produced
from jobs.runtime.progress import JobIdentity, ProgressListener
from jobs.runtime.query_listener import JsonEventsListener
from jobs.worker.packer import Packer
from jobs.worker.runs import GroupRuns


@dataclass
class Watched:
    """One group's query as the listener follows it (a pack's query is followed once
    per member, each member's progress being its own topic's: jobs/worker/packer.py)."""

    query_name: str
    group_id: str
    progress: ProgressListener
    produces: bool  # it writes to Kafka: its records produced are reported
    packed: bool = False  # the query is its pack's: the packer tells the group it stopped
    query_run: str = ""  # Spark's run id of the group's own query, once it started
    produced_from: int = 0  # the group's produced.total when its run started
    busy: deque[tuple[float, float]] = field(default_factory=deque)  # (when, batch ms)


class QueryEvents(JsonEventsListener):
    def __init__(
        self,
        runs: GroupRuns,
        cpu_cores: Callable[[], float] = lambda: 0.0,
        *,
        packer: Packer | None = None,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`cpu_cores` gives the cores the application uses now (a `core.processes.CpuMeter`);
        `packer`, the worker's packs, is told of every query's start and stop."""
        self._runs = runs
        self._packer = packer
        self._cpu_cores = cpu_cores
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._watched: dict[tuple[str, str], Watched] = {}  # (query name, group id)
        self._names: dict[str, str] = {}  # query id -> name

    def watch(
        self,
        query_name: str,
        group_id: str,
        identity: JobIdentity,
        *,
        produces: bool = False,
        packed: bool = False,
        produced_from: int | None = None,
    ) -> None:
        """Follow the group's query (and the queries named after it: the dispatcher's tiers),
        `packed` when it is the group's pack's; the group's progress is that of `identity`'s
        topic (all the query's with none). A group that `produces` reports its records
        produced since `produced_from` (its `produced.total` when its run started; default
        now)."""
        start = produced.total(group_id) if produced_from is None else produced_from
        with self._lock:
            self._watched[(query_name, group_id)] = Watched(
                query_name,
                group_id,
                ProgressListener(query_name, identity),
                produces,
                packed,
                produced_from=start,
            )

    def unwatch(self, query_name: str, group_id: str) -> None:
        with self._lock:
            self._watched.pop((query_name, group_id), None)

    def traffic(self, group_id: str) -> JobStatus | None:
        """The group's task statuses for its heartbeat status: offsets and rates summed over
        its partitions, its share of the CPU, its records produced; None before its query
        reported any progress."""
        with self._lock:
            mine = [w for w in self._watched.values() if w.group_id == group_id]
            share = self._busy_share(group_id)
        statuses = [s.kafka_consumer_task_status for w in mine for s in w.progress.statuses()]
        if not statuses:
            return None
        result = JobStatus(
            kafka_consumer_task_status=KafkaConsumerTaskStatus(
                read_offset=sum(s.read_offset for s in statuses),
                commit_offset=sum(s.commit_offset for s in statuses),
                messages_per_sec=sum(s.messages_per_sec for s in statuses),
                bytes_per_sec=sum(s.bytes_per_sec for s in statuses),
                cpu_usage=self._cpu_cores() * share,
            )
        )
        producing = [w.produced_from for w in mine if w.produces]
        if producing:
            since_start = produced.total(group_id) - min(producing)
            result.kafka_dispatcher_task_status.CopyFrom(
                KafkaDispatcherTaskStatus(num_records_produced=since_start)
            )
        return result

    def _busy_share(self, group_id: str) -> float:
        """The group's part of the batch time of every query in the window, a query's time
        shared equally by the groups it runs (lock held)."""
        since = self._clock() - self._window
        sharing: dict[str, int] = {}
        for watched in self._watched.values():
            sharing[watched.query_name] = sharing.get(watched.query_name, 0) + 1
        total = mine = 0.0
        for watched in self._watched.values():
            while watched.busy and watched.busy[0][0] < since:
                watched.busy.popleft()
            spent = sum(ms for _, ms in watched.busy) / sharing[watched.query_name]
            total += spent
            mine += spent if watched.group_id == group_id else 0.0
        return mine / total if total else 0.0

    def _groups_of(self, query_name: str) -> list[Watched]:
        """The groups of the query (of a query named after theirs: the dispatcher's tiers)."""
        with self._lock:
            return [w for w in self._watched.values() if _of_group(query_name, w)]

    def onQueryStarted(self, event) -> None:
        name = event.name or ""
        with self._lock:
            self._names[str(event.id)] = name
            # the groups' own query, not their tiers'
            started = [w for w in self._watched.values() if w.query_name == name]
            for watched in started:
                watched.query_run = str(event.runId)
        if self._packer is not None:
            self._packer.query_started(name, str(event.id))
        for watched in started:
            self._runs.note_started(watched.group_id, str(event.runId))

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        for watched in self._groups_of(progress.get("name") or ""):
            watched.progress.record(progress)
            with self._lock:
                spent = (progress.get("durationMs") or {}).get("triggerExecution", 0)
                watched.busy.append((self._clock(), float(spent)))

    def onQueryIdle(self, event) -> None:
        with self._lock:
            name = self._names.get(str(event.id), "")
        for watched in self._groups_of(name):
            watched.progress.onQueryIdle(event)

    def onQueryTerminated(self, event) -> None:
        with self._lock:
            name = self._names.pop(str(event.id), "")
        if event.exception:
            for watched in self._groups_of(name):
                self._runs.note_failure(watched.group_id, event.exception)
            return
        if self._packer is not None:
            self._packer.query_ended(str(event.id))
        for watched in self._groups_of(name):
            if not watched.packed and not self._runs_a_query(watched):
                self._runs.note_stopped(watched.group_id, watched.query_run)

    def _runs_a_query(self, watched: Watched) -> bool:
        """Whether a query of the group (its own, its tiers') is still active."""
        with self._lock:
            return any(_of_group(name, watched) for name in self._names.values())


def _of_group(query_name: str, watched: Watched) -> bool:
    """Whether the query of that name is the watched group's own or one named after it."""
    return query_name == watched.query_name or query_name.startswith(f"{watched.query_name}-")
