"""A JobGroup's consumer-group offsets: committing a job's read offsets, and reading a group's.

A job's own position is in its checkpoint; the commit is for the world outside, so that lag
monitors (Burrow, the availability job's evaluator, kafka-consumer-groups) see the job as a
consumer of the topic. Committed by the replication job, LOAD_GEN_CONSUME and the dispatcher;
read by the dispatcher (a new checkpoint starts where its group left off) and the replication
job's offset translation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from core.config import ClusterConfig

_T = TypeVar("_T")

# A group coordinator that moved or is still loading answers with these; a retry a moment
# later goes through.
_COORDINATOR_ERRORS = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


# Ten tries half a second apart ride out a coordinator election after a broker restart; with
# one try, that transient error failed a replication job's query.
DEFAULT_ATTEMPTS = 10


def is_transient(error: KafkaException) -> bool:
    """Whether a failed commit may go through if tried again (a retriable error, or the group
    coordinator moving or loading)."""
    cause = error.args[0] if error.args else None
    return isinstance(cause, KafkaError) and (
        cause.retriable() or cause.code() in _COORDINATOR_ERRORS
    )


def with_transient_retries(
    call: Callable[[], _T], attempts: int = DEFAULT_ATTEMPTS, retry_wait_s: float = 0.5
) -> _T:
    """`call()`, tried again `retry_wait_s` later while it fails with a transient error
    (`is_transient`), up to `attempts` tries in all; the last failure, or any other, raises."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except KafkaException as error:
            if attempt == attempts or not is_transient(error):
                raise
            time.sleep(retry_wait_s)
    raise AssertionError("unreachable: the last attempt returns or raises")


class GroupOffsetCommitter:
    """Commits next offsets of `topic`'s partitions to `group` (a confluent-kafka Consumer
    that never subscribes, made on the first commit). Safe to call from several threads (the
    dispatcher's queries share one)."""

    def __init__(
        self,
        client_config: Mapping[str, object],
        group: str,
        topic: str,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        retry_wait_s: float = 0.5,
    ) -> None:
        self.group = group
        self.topic = topic
        self._config = {**client_config, "group.id": group, "enable.auto.commit": False}
        self._attempts = attempts
        self._retry_wait_s = retry_wait_s
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def commit(self, next_offsets: Mapping[int, int], *, topic: str | None = None) -> None:
        """Commit {partition: next offset} of `topic` (default: the committer's), synchronously.
        A transient failure is tried again, up to `attempts` tries in all; the last failure, or
        any other, raises KafkaException."""
        if not next_offsets:
            return
        offsets = [
            TopicPartition(topic or self.topic, p, o) for p, o in sorted(next_offsets.items())
        ]
        with self._lock:
            if self._consumer is None:
                self._consumer = Consumer(self._config)
            self._commit(self._consumer, offsets)

    def _commit(self, consumer: Consumer, offsets: list[TopicPartition]) -> None:
        with_transient_retries(
            lambda: consumer.commit(offsets=offsets, asynchronous=False),
            self._attempts,
            self._retry_wait_s,
        )

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


def committed_offsets(
    cluster: ClusterConfig, group: str, topic: str, *, retry_wait_s: float = 0.5
) -> dict[int, int]:
    """The group's committed offsets on `topic`, by partition (partitions without a commit
    left out; empty for a group that never committed). Reads the commits; does not join the
    group. A transient error (a coordinator still loading, as on a cluster whose
    `__consumer_offsets` is being created) is tried again (`with_transient_retries`). A
    consumer closed here, not an AdminClient: an AdminClient left to the garbage collector
    crashed a dispatcher's driver (a segfault in librdkafka's main thread)."""
    consumer = Consumer({**cluster.client_config(), "group.id": group, "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        asked = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        found = with_transient_retries(
            lambda: consumer.committed(asked, timeout=30), retry_wait_s=retry_wait_s
        )
        return {
            tp.partition: tp.offset
            for tp in found
            if tp.offset != OFFSET_INVALID and tp.offset >= 0
        }
    finally:
        consumer.close()
