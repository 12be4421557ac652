"""Topic creation and growth that survive a request lost with its broker handle; the checks'
shared admin clients."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

from core.config import ClusterConfig
from core.kafka_admin import SHARED_IDLE_S, create_partitions, create_topic, shared_admin
from testing.polling import wait_for


def _failed(code: int) -> Future[None]:
    future: Future[None] = Future()
    future.set_exception(KafkaException(KafkaError(code)))
    return future


def _done() -> Future[None]:
    future: Future[None] = Future()
    future.set_result(None)
    return future


class ScriptedAdmin:
    """Answers create_topics with a scripted sequence of outcomes.

    librdkafka loses a request only when it decommissions the broker handle the request is in
    flight on, a race a real broker cannot be made to lose on demand; the outcomes below are
    the ones librdkafka reports then (CI saw _DESTROY_BROKER on a fresh AdminClient).
    """

    def __init__(self, outcomes: list[Future[None]], existing: list[list[int]] | None = None):
        self.outcomes = outcomes
        self.calls = 0
        self.existing = existing  # the replica list of each partition of the topic, if it exists

    def create_topics(self, topics: list[NewTopic], request_timeout: float) -> dict:
        self.calls += 1
        return {topics[0].topic: self.outcomes.pop(0)}

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        if self.existing is None:
            return SimpleNamespace(topics={})
        partitions = {
            i: SimpleNamespace(id=i, replicas=replicas) for i, replicas in enumerate(self.existing)
        }
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})


def test_a_lost_request_is_retried_and_already_exists_then_means_created() -> None:
    admin = ScriptedAdmin(
        [_failed(KafkaError._DESTROY_BROKER), _failed(KafkaError.TOPIC_ALREADY_EXISTS)],
        existing=[[1]],
    )
    create_topic(admin, NewTopic("t", 1))  # type: ignore[arg-type]
    assert admin.calls == 2


def test_already_exists_on_the_first_attempt_with_the_asked_shape_means_created() -> None:
    # librdkafka re-sends a CreateTopics to a new controller by itself: the first attempt's
    # answer is then TOPIC_ALREADY_EXISTS for the topic the request created.
    admin = ScriptedAdmin([_failed(KafkaError.TOPIC_ALREADY_EXISTS)], existing=[[1, 2], [2, 1]])
    create_topic(admin, NewTopic("t", 2, replication_factor=2))  # type: ignore[arg-type]
    create_topic_again = ScriptedAdmin(
        [_failed(KafkaError.TOPIC_ALREADY_EXISTS)], existing=[[1, 2], [2, 1]]
    )
    asked = NewTopic("t", 2, replica_assignment=[[1, 2], [2, 1]])
    create_topic(create_topic_again, asked)  # type: ignore[arg-type]
    assert admin.calls == create_topic_again.calls == 1


@pytest.mark.parametrize(
    ("asked", "existing"),
    [
        (NewTopic("t", 2), [[1]]),  # fewer partitions
        (NewTopic("t", 1), [[1], [1]]),  # more partitions
        (NewTopic("t", 1, replication_factor=2), [[1]]),  # fewer replicas
        (NewTopic("t", 1, replica_assignment=[[2]]), [[1]]),  # other replicas
        (NewTopic("t", 1), None),  # not in the metadata
    ],
)
def test_already_exists_with_another_shape_is_an_error(
    asked: NewTopic, existing: list[list[int]] | None
) -> None:
    admin = ScriptedAdmin([_failed(KafkaError.TOPIC_ALREADY_EXISTS)], existing=existing)
    with pytest.raises(KafkaException) as raised:
        create_topic(admin, asked)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert admin.calls == 1


def test_a_request_lost_on_every_attempt_raises_the_last_loss() -> None:
    admin = ScriptedAdmin([_failed(KafkaError._TRANSPORT) for _ in range(3)])
    with pytest.raises(KafkaException) as raised:
        create_topic(admin, NewTopic("t", 1))  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError._TRANSPORT
    assert admin.calls == 3


def test_no_answer_in_time_is_a_kafka_timeout_naming_the_topic() -> None:
    admin = ScriptedAdmin([Future()])  # never completes
    with pytest.raises(KafkaException, match=r"topic t: no answer in 0\.05 s") as raised:
        create_topic(admin, NewTopic("t", 1), timeout_s=0.05)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT
    assert admin.calls == 1


def test_other_errors_are_not_retried() -> None:
    admin = ScriptedAdmin([_failed(KafkaError.POLICY_VIOLATION), _done()])
    with pytest.raises(KafkaException):
        create_topic(admin, NewTopic("t", 1))  # type: ignore[arg-type]
    assert admin.calls == 1


@pytest.mark.integration
def test_create_and_grow_on_a_real_broker(kafka) -> None:
    topic = f"admin-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin()
    create_topic(admin, NewTopic(topic, 2, replication_factor=-1))
    create_topic(admin, NewTopic(topic, 2, replication_factor=-1))  # there as asked: created
    with pytest.raises(KafkaException) as other:
        create_topic(admin, NewTopic(topic, 4, replication_factor=-1))
    assert other.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    create_partitions(admin, NewPartitions(topic, 3))
    # The request is done when the controller has it; the broker's metadata follows a moment later.
    wait_for(
        lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3,
        30,
        "three partitions in the metadata",
    )
    with pytest.raises(KafkaException) as same:
        create_partitions(admin, NewPartitions(topic, 3))
    assert same.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_checks_share_one_admin_client_per_cluster_configuration_until_it_idles():
    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731
    here = ClusterConfig("here", "127.0.0.1:9")
    same_brokers = ClusterConfig("alias", "127.0.0.1:9")
    elsewhere = ClusterConfig("there", "127.0.0.1:10")
    first = shared_admin(here, clock)
    assert shared_admin(same_brokers, clock) is first
    assert shared_admin(elsewhere, clock) is not first
    now[0] += SHARED_IDLE_S - 1
    assert shared_admin(here, clock) is first  # used again: its idle time starts over
    now[0] += SHARED_IDLE_S + 1
    assert shared_admin(here, clock) is not first


def test_a_forked_child_never_lets_go_of_a_client_it_inherited(monkeypatch):
    from core import kafka_admin

    inherited = object()  # the parent's client, copied by fork: its threads are not here
    foreign_key = (os.getpid() + 1, (("bootstrap.servers", "'127.0.0.1:11'"),))
    monkeypatch.setitem(kafka_admin._shared, foreign_key, (inherited, 0.0))
    shared_admin(ClusterConfig("here", "127.0.0.1:9"), lambda: SHARED_IDLE_S * 10)
    assert kafka_admin._shared[foreign_key][0] is inherited
