"""testing.polling: a poll waits through the errors a settling broker gives and fails on any
other at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from testing.polling import is_transient, wait_for


@pytest.mark.parametrize(
    "code",
    [KafkaError._DESTROY_BROKER, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT],
)
def test_a_settling_brokers_error_is_waited_through(code: int) -> None:
    answers = iter([KafkaException(KafkaError(code)), None, "ready"])

    def poll() -> str | None:
        answer = next(answers)
        if isinstance(answer, KafkaException):
            raise answer
        return answer

    assert is_transient(KafkaException(KafkaError(code)))
    assert wait_for(poll, 10, "a settling broker", interval_s=0) == "ready"


def test_any_other_error_fails_the_poll_at_once() -> None:
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not is_transient(refused)

    def poll() -> None:
        raise refused

    with pytest.raises(KafkaException):
        wait_for(poll, 10, "a refusing broker", interval_s=0)
