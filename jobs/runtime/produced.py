"""Records each JobGroup's queries wrote to Kafka in this application, counted by the job
that wrote them, for the worker's heartbeats (`num_records_produced`, jobs/worker/events.py).

Why not Spark's progress: the replication's copy never reads its batch's rows (its
numInputRows is 0), and a pack's query writes for many groups. The replication's stats
writer adds each batch's records replicated per group (jobs/replication/stats.py).
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_records: dict[str, int] = {}  # JobGroup id -> records written since the application started


def add(group_id: str, records: int) -> None:
    """Count `records` more written for the group (called from any query's thread)."""
    with _lock:
        _records[group_id] = _records.get(group_id, 0) + records


def total(group_id: str) -> int:
    """The records written for the group since the application started."""
    with _lock:
        return _records.get(group_id, 0)
