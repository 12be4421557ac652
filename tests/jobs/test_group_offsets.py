"""The consumer-group commit the replication job and LOAD_GEN_CONSUME share
(`jobs/runtime/group_offsets.py`), against a real broker; and which failures it retries."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from core.config import ClusterConfig
from jobs.runtime import group_offsets
from jobs.runtime.group_offsets import GroupOffsetCommitter, is_transient
from testing.topic_data import committed_offsets


def test_commits_the_offsets_a_lag_monitor_then_reads(kafka) -> None:
    topic = f"group-offsets-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions=3)
    committer = GroupOffsetCommitter(
        {"bootstrap.servers": kafka.bootstrap_servers}, f"{topic}-group", topic, attempts=10
    )
    try:
        committer.commit({0: 5, 2: 7})
        committer.commit({})  # nothing read: nothing to commit, no error
        first = committed_offsets(kafka.bootstrap_servers, f"{topic}-group", topic, 3)
        committer.commit({0: 9})
        second = committed_offsets(kafka.bootstrap_servers, f"{topic}-group", topic, 3)
    finally:
        committer.close()
    assert first[0] == 5 and first[2] == 7 and first[1] < 0
    assert second[0] == 9 and second[2] == 7


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), True),
        (KafkaError(KafkaError.NOT_COORDINATOR), True),
        (KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), True),
        (KafkaError(KafkaError._TIMED_OUT, retriable=True), True),  # librdkafka says retriable
        (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), False),
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), False),
    ],
)
def test_only_coordinator_moves_and_retriable_errors_are_transient(error, transient) -> None:
    assert is_transient(KafkaException(error)) is transient


class _FailingThenCommitting:
    """A Consumer stand-in whose first `failures` commits raise NOT_COORDINATOR, as a group
    coordinator does while it moves after a broker restart."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.committed: list = []

    def commit(self, offsets, asynchronous):
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
        self.committed.append([(tp.partition, tp.offset) for tp in offsets])


def test_a_committer_made_with_the_defaults_rides_out_a_moving_coordinator() -> None:
    # The replication job's stats make theirs with the defaults.
    committer = GroupOffsetCommitter({}, "g", "t", retry_wait_s=0.0)
    consumer = _FailingThenCommitting(failures=3)
    committer._consumer = consumer  # type: ignore[assignment]
    committer.commit({1: 4, 0: 2})
    assert consumer.committed == [[(0, 2), (1, 4)]]


class _LoadingCoordinator:
    """A Consumer stand-in for a topic of two partitions whose group coordinator answers
    NOT_COORDINATOR to the first `failures` reads of the commits (a new cluster's
    `__consumer_offsets` still being created), then partition 1's commit."""

    failures = 2

    def __init__(self, config) -> None:
        self.closed = False

    def list_topics(self, topic, timeout):
        partitions = {0: object(), 1: object()}
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=partitions, error=None)})

    def committed(self, asked, timeout):
        if _LoadingCoordinator.failures:
            _LoadingCoordinator.failures -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
        return [
            TopicPartition(tp.topic, tp.partition, 7 if tp.partition else -1001) for tp in asked
        ]

    def close(self) -> None:
        self.closed = True


def test_reading_a_groups_commits_rides_out_a_coordinator_still_loading(monkeypatch) -> None:
    monkeypatch.setattr(group_offsets, "Consumer", _LoadingCoordinator)
    monkeypatch.setattr(_LoadingCoordinator, "failures", 2)
    cluster = ClusterConfig(name="local", bootstrap_servers="127.0.0.1:1")
    assert group_offsets.committed_offsets(cluster, "g", "t", retry_wait_s=0.0) == {1: 7}
    assert _LoadingCoordinator.failures == 0
