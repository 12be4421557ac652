"""LOAD_GEN_PRODUCE's plan of each micro-batch and the state it carries between batches (pure).

Every partition of the topic has its own generator: sequence numbers 0, 1, 2, ... in its own
partition, its share of the rate caps, and its share of a record-count bound. The generators
of a group of partitions run in a JVM thread that outlives the Spark tasks
(`dev.uatu.loadgen.Runner`); each micro-batch's task collects what they sent during one
window (`Bounds.window_us`: schedule time with a rate cap, wall time without) and reports one
row per partition back, from which `after_batch` makes the next `ProduceState`. The state is
saved under the checkpoint after every batch (`ProduceState.to_json`), so a restarted job
continues the sequence numbers where it stopped: `plan_batch` gives each generator a
`PartitionPlan` (next sequence number, records left, where its schedule stands, the run's
deadline), which a runner starts from when it is new.

With a rate cap each generator follows a schedule in epoch microseconds: its next record is
due at `due_us`. A saved schedule that lags the clock by more than `MAX_CREDIT_US` (the job
was stopped) restarts from that far back, so idle time never buys a long burst.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

UNBOUNDED = 2**63 - 1  # a quota that never runs out
MAX_CREDIT_US = 250_000
_TOTALS = ("records", "duplicates", "late", "untimed", "bytes", "value_bytes")


@dataclass(frozen=True)
class PartitionState:
    next_seq: int = 0
    due_us: int | None = None  # paced runs: schedule time of the next record
    deadline_us: int | None = None  # a duration-bound run's end, set by its first batch
    records: int = 0  # everything this generator sent, over all batches
    duplicates: int = 0
    late: int = 0
    untimed: int = 0
    bytes: int = 0  # key + value
    value_bytes: int = 0


@dataclass(frozen=True)
class ProduceState:
    """The generators after batch `batch_id` (-1: before the first)."""

    run_id: str
    batch_id: int = -1
    partitions: Mapping[int, PartitionState] = field(default_factory=dict)

    @classmethod
    def new(cls) -> ProduceState:
        return cls(run_id=uuid.uuid4().hex[:8])

    def partition(self, p: int) -> PartitionState:
        return self.partitions.get(p, PartitionState())

    def totals(self) -> dict[str, int]:
        return {k: sum(getattr(s, k) for s in self.partitions.values()) for k in _TOTALS}

    def to_json(self) -> bytes:
        data = asdict(self)
        data["partitions"] = {str(p): asdict(s) for p, s in sorted(self.partitions.items())}
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ProduceState:
        data = json.loads(raw)
        partitions = {int(p): PartitionState(**s) for p, s in data.pop("partitions").items()}
        return cls(**data, partitions=partitions)


@dataclass(frozen=True)
class PartitionPlan:
    """One generator's part of one batch (`dev.uatu.loadgen.PartitionPlan`)."""

    partition: int
    next_seq: int
    quota: int  # records at most (UNBOUNDED: no count bound)
    due_us: int  # paced: schedule time of the next record; 0: when the generator starts
    # The run's end, schedule (paced) or wall time: UNBOUNDED none; < 0 that long after the
    # generator's first record.
    deadline_us: int


@dataclass(frozen=True)
class Bounds:
    """What ends a bounded run, and how each batch is paced."""

    partitions: int
    batch_seconds: float
    paced: bool
    total_records: int = 0  # 0 = no count bound
    duration_seconds: float = 0  # 0 = no time bound

    @property
    def window_us(self) -> int:
        """Schedule (paced) or wall (unpaced) time one batch covers."""
        return int(self.batch_seconds * 1_000_000)

    def quota(self, partition: int) -> int:
        """Records partition `partition` sends in all: total_records spread evenly."""
        if not self.total_records:
            return UNBOUNDED
        share, extra = divmod(self.total_records, self.partitions)
        return share + (1 if partition < extra else 0)


def plan_batch(state: ProduceState, bounds: Bounds, now_us: int) -> list[PartitionPlan]:
    """The plans of the next batch, one per partition (a finished generator gets quota 0, so
    its group's runner goes on unchanged).

    Before a generator's first batch its duration bound is relative (a negative `deadline_us`:
    that many microseconds after its first record is due); its first batch reports the
    absolute deadline, which the state keeps.
    """
    plans = []
    for p in range(bounds.partitions):
        current = state.partition(p)
        quota = bounds.quota(p)
        left = quota if quota == UNBOUNDED else max(0, quota - current.records)
        due = 0
        if bounds.paced and current.due_us is not None:
            due = max(current.due_us, now_us - MAX_CREDIT_US)
        if current.deadline_us is not None:
            deadline = current.deadline_us
        elif bounds.duration_seconds:
            deadline = -int(bounds.duration_seconds * 1_000_000)
        else:
            deadline = UNBOUNDED
        plans.append(PartitionPlan(p, current.next_seq, left, due, deadline))
    return plans


def after_batch(
    state: ProduceState, rows: Sequence[Mapping], batch_id: int, paced: bool
) -> ProduceState:
    """The state after a batch that returned `rows` (one per partition of
    `ProduceTask.ROW_SCHEMA`)."""
    partitions = dict(state.partitions)
    for row in rows:
        before = state.partition(row["partition"])
        partitions[row["partition"]] = PartitionState(
            next_seq=row["next_seq"],
            due_us=row["next_due_us"] if paced else None,
            deadline_us=None if row["deadline_us"] >= UNBOUNDED else row["deadline_us"],
            **{k: getattr(before, k) + row[k] for k in _TOTALS},
        )
    return replace(state, batch_id=batch_id, partitions=partitions)


def is_done(state: ProduceState, bounds: Bounds, now_us: int) -> bool:
    """True once every generator of a bounded run has sent its share or reached its end."""
    if not bounds.total_records and not bounds.duration_seconds:
        return False

    def finished(p: int) -> bool:
        current = state.partition(p)
        if current.records >= bounds.quota(p):
            return True
        if current.deadline_us is None:
            return False
        position = current.due_us if bounds.paced else now_us
        return position is not None and position >= current.deadline_us

    return all(finished(p) for p in range(bounds.partitions))


def default_producer_tasks(partitions: int, executors: int) -> int:
    """One producer task per executor, at most one per partition. The tasks of one executor
    share its Kafka producer (`Producers.java`), whose one I/O thread sends for all of them: a
    second sending thread in the same JVM only contends with the first (bench-loadgen on
    local[2] compared two tasks with one: docs/benchmarks.md, load generators)."""
    return max(1, min(partitions, executors))


def task_plans(plans: Sequence[PartitionPlan], tasks: int) -> list[list[PartitionPlan]]:
    """Partition plans grouped into at most `tasks` producer tasks (p -> task p % tasks)."""
    groups: dict[int, list[PartitionPlan]] = {}
    for plan in plans:
        groups.setdefault(plan.partition % max(1, tasks), []).append(plan)
    return [groups[t] for t in sorted(groups)]
