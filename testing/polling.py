"""Polling with a deadline, tolerant of the transient errors a real broker gives.

A test that waits for a broker to reach some state polls it; while a topic is being created
or a leader elected, the broker answers NOT_LEADER_FOR_PARTITION, UNKNOWN_TOPIC_OR_PART,
LEADER_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS for a moment. Those are retried until
the deadline, like a falsy answer; any other error fails the poll at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")

# Errors a healthy broker gives while it settles (leadership moves, topic creation,
# coordinator loading); librdkafka marks most, not all, of them retriable.
TRANSIENT_KAFKA_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        # A request in flight on the bootstrap connection of a cluster that just started:
        # librdkafka replaces that connection once it learns the brokers' own addresses.
        KafkaError._DESTROY_BROKER,
    }
)


def is_transient(error: BaseException) -> bool:
    """True for a Kafka error that a retry after a moment can clear."""
    if not isinstance(error, KafkaException) or not error.args:
        return False
    kafka_error = error.args[0]
    if not isinstance(kafka_error, KafkaError):
        return False
    return kafka_error.retriable() or kafka_error.code() in TRANSIENT_KAFKA_ERRORS


def wait_for(
    predicate: Callable[[], T], deadline_s: float, what: str, interval_s: float = 0.5
) -> T:
    """Poll `predicate` until it returns something truthy, or fail after `deadline_s`.

    A transient Kafka error (`is_transient`) counts as "not yet"; the last one is named in
    the timeout message.
    """
    deadline = time.monotonic() + deadline_s
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except KafkaException as e:
            if not is_transient(e):
                raise
            last_error = e
        else:
            if value:
                return value
        time.sleep(interval_s)
    detail = f" (last transient error: {last_error})" if last_error is not None else ""
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}{detail}")
