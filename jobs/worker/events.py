"""The worker application's one streaming-query listener: what each group's query reports.

Spark calls every listener for every query's events, so the worker registers one, which routes
by query name (a termination event names the query by id only: the start event's name is
kept): a group's progress goes to its `ProgressListener` (jobs/runtime/progress.py), whose
per-partition statuses become the group's rates and offsets in the worker's heartbeats
(`task_status`, summed over the partitions); a failure's one line goes to the group's run
(`GroupRuns.note_failure`).
"""

from __future__ import annotations

import json
import threading

from pyspark.sql.streaming import StreamingQueryListener
from uber.data.kafka.datatransfer.job_status_pb2 import KafkaConsumerTaskStatus

from jobs.runtime.progress import JobIdentity, ProgressListener
from jobs.worker.runs import GroupRuns


class QueryEvents(StreamingQueryListener):
    def __init__(self, runs: GroupRuns) -> None:
        self._runs = runs
        self._lock = threading.Lock()
        self._watched: dict[str, tuple[str, ProgressListener]] = {}  # query name -> group
        self._names: dict[str, str] = {}  # query id -> name

    def watch(self, query_name: str, group_id: str, identity: JobIdentity) -> None:
        """Follow the group's query (and the queries named after it: the dispatcher's tiers)."""
        with self._lock:
            self._watched[query_name] = (group_id, ProgressListener(query_name, identity))

    def unwatch(self, query_name: str, group_id: str) -> None:
        with self._lock:
            if self._watched.get(query_name, ("",))[0] == group_id:
                del self._watched[query_name]

    def task_status(self, group_id: str) -> KafkaConsumerTaskStatus | None:
        """The group's offsets and rates, summed over its partitions; None before its query
        reported any."""
        with self._lock:
            listeners = [p for g, p in self._watched.values() if g == group_id]
        statuses = [s.kafka_consumer_task_status for p in listeners for s in p.statuses()]
        if not statuses:
            return None
        return KafkaConsumerTaskStatus(
            read_offset=sum(s.read_offset for s in statuses),
            commit_offset=sum(s.commit_offset for s in statuses),
            messages_per_sec=sum(s.messages_per_sec for s in statuses),
            bytes_per_sec=sum(s.bytes_per_sec for s in statuses),
        )

    def _group_of(self, query_name: str) -> tuple[str, ProgressListener] | None:
        with self._lock:
            for name, watched in self._watched.items():
                if query_name == name or query_name.startswith(f"{name}-"):
                    return watched
        return None

    def onQueryStarted(self, event) -> None:
        with self._lock:
            self._names[str(event.id)] = event.name or ""

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        watched = self._group_of(progress.get("name") or "")
        if watched is not None:
            watched[1].record(progress)

    def onQueryIdle(self, event) -> None:
        with self._lock:
            name = self._names.get(str(event.id), "")
        watched = self._group_of(name)
        if watched is not None:
            watched[1].onQueryIdle(event)

    def onQueryTerminated(self, event) -> None:
        with self._lock:
            name = self._names.pop(str(event.id), "")
        watched = self._group_of(name) if event.exception else None
        if watched is not None:
            self._runs.note_failure(watched[0], event.exception)
