"""uForwarder's routing table (`DispatcherImpl.dispatcherResponseFromGrpcStatus`) against
jobs/dispatch/routing.py.

The expected codes are typed in here from the reference (DispatcherImpl, GrpcDispatcher,
ProcessorImpl.handleTimeout, RetryUtils, BlockingQueueStubManager), not derived from the module's
own tables.
"""

from __future__ import annotations

import itertools

import grpc
import pytest

from jobs.dispatch.routing import (
    Code,
    Kind,
    Routes,
    Tier,
    after_timeout,
    backoff_ms,
    destination,
    hol_rule,
    invocations_until_dlq,
    response_code,
    retry_topic,
    sort_tiers,
    timeout_ms,
)

# Status -> code with no trailer, from the table (UNAVAILABLE in time: in memory).
EXPECTED_BY_STATUS = {
    "OK": "COMMIT",
    "ALREADY_EXISTS": "SKIP",
    "RESOURCE_EXHAUSTED": "RETRY",
    "NOT_FOUND": "DLQ",
    "INVALID_ARGUMENT": "DLQ",
    "FAILED_PRECONDITION": "DLQ",
    "ABORTED": "DLQ",
    "OUT_OF_RANGE": "DLQ",
    "DATA_LOSS": "DLQ",
    "DEADLINE_EXCEEDED": "BACKOFF",
    "UNAVAILABLE": "INVALID",
    "UNKNOWN": "INVALID",
    "CANCELLED": "INVALID",
    "UNIMPLEMENTED": "INVALID",
    "INTERNAL": "INVALID",
    "PERMISSION_DENIED": "INVALID",
    "UNAUTHENTICATED": "INVALID",
}
EXPECTED_BY_TRAILER = {"Retry": "RETRY", "Stash": "DLQ", "Skip": "SKIP"}
TRAILERS = (None, "", "Retry", "Stash", "Skip", "retry", "Bogus")


def expected_code(status: str, trailer: str | None, overdue: bool) -> str:
    if status == "OK":
        return "COMMIT"  # an OK answer is never overridden: the trailer is read on errors only
    if trailer:
        return EXPECTED_BY_TRAILER.get(trailer, "INVALID")  # case-sensitive, as uForwarder
    if status == "UNAVAILABLE" and overdue:
        return "BACKOFF"
    return EXPECTED_BY_STATUS[status]


def test_the_table_names_every_grpc_status() -> None:
    assert set(EXPECTED_BY_STATUS) == {s.name for s in grpc.StatusCode}


@pytest.mark.parametrize(
    ("status", "trailer", "overdue"),
    list(itertools.product(sorted(EXPECTED_BY_STATUS), TRAILERS, (False, True))),
)
def test_every_status_and_trailer(status: str, trailer: str | None, overdue: bool) -> None:
    assert response_code(status, trailer, overdue).value == expected_code(status, trailer, overdue)


TWO_TIERS = Routes(
    sort_tiers([Tier("t2", 5_000, 2), Tier("t1", 1_000, 2)]), "dlq", "resq", max_rpc_timeouts=0
)


def test_tiers_are_sorted_by_delay() -> None:
    assert [t.topic for t in TWO_TIERS.tiers] == ["t1", "t2"]


@pytest.mark.parametrize(
    ("retry_count", "topic"),
    [(0, "t1"), (1, "t1"), (2, "t1"), (3, "t2"), (4, "t2"), (5, "dlq"), (6, "dlq"), (99, "dlq")],
)
def test_tier_for_retry_count(retry_count: int, topic: str) -> None:
    assert retry_topic(TWO_TIERS, retry_count) == topic


def test_uforwarders_integration_case_is_six_invocations_with_the_dlq_redrive() -> None:
    # 1 from the source, 2 from tier 1, 2 from tier 2 -> the DLQ; +1 when the DLQ is redriven.
    assert invocations_until_dlq(TWO_TIERS) + 1 == 6
    path = [destination(TWO_TIERS, Code.RETRY, n) for n in range(1, 6)]
    assert path == ["t1", "t1", "t2", "t2", "dlq"]


def test_past_the_last_tier_without_a_dlq_stays_in_the_last_tier() -> None:
    routes = Routes(TWO_TIERS.tiers, "", "", 0)
    assert [retry_topic(routes, n) for n in (4, 5, 50)] == ["t2", "t2", "t2"]
    with pytest.raises(ValueError):
        invocations_until_dlq(routes)


def test_a_tier_with_max_retry_count_zero_is_passed_over() -> None:
    routes = Routes(sort_tiers([Tier("a", 1, 0), Tier("b", 2, 1)]), "dlq", "", 0)
    assert [retry_topic(routes, n) for n in (0, 1, 2)] == ["a", "b", "dlq"]


@pytest.mark.parametrize(
    ("tiers", "dlq", "resq", "code", "retry_count", "expected"),
    [
        ((), "dlq", "", Code.RETRY, 1, "dlq"),  # no tiers: RETRY goes to the DLQ
        ((), "", "", Code.RETRY, 1, ""),  # nowhere: in memory
        ((), "", "", Code.DLQ, 1, ""),
        (TWO_TIERS.tiers, "", "", Code.DLQ, 1, "t1"),  # no DLQ: a DLQ answer uses the tiers
        (TWO_TIERS.tiers, "", "", Code.DLQ, 9, "t2"),
        (TWO_TIERS.tiers, "dlq", "", Code.DLQ, 1, "dlq"),
        (TWO_TIERS.tiers, "dlq", "resq", Code.RESQ, 1, "resq"),
        (TWO_TIERS.tiers, "dlq", "", Code.RESQ, 1, ""),  # resq disabled: in memory
        (TWO_TIERS.tiers, "dlq", "resq", Code.INVALID, 1, ""),
    ],
)
def test_destinations(tiers, dlq, resq, code, retry_count, expected) -> None:
    assert destination(Routes(tiers, dlq, resq, 0), code, retry_count) == expected


@pytest.mark.parametrize(
    ("kind", "max_timeouts", "timeouts", "token", "expected"),
    [
        (Kind.DLQ, 0, 0, True, Code.DLQ),  # a DLQ record stays in the DLQ
        (Kind.DLQ, 3, 5, False, Code.DLQ),
        (Kind.RESQ, 0, 0, True, Code.INVALID),  # a resq record retries in memory
        (Kind.RESQ, 1, 9, True, Code.INVALID),
        (Kind.MAIN, 0, 7, True, Code.RETRY),  # max_rpc_timeouts off: always a retry tier
        (Kind.MAIN, 2, 1, True, Code.RETRY),  # not yet timed out that often
        (Kind.MAIN, 2, 2, True, Code.DLQ),
        (Kind.TIER, 2, 3, True, Code.DLQ),
        (Kind.MAIN, 2, 2, False, Code.RETRY),  # the token bucket refuses
    ],
)
def test_after_timeout(kind, max_timeouts, timeouts, token, expected) -> None:
    routes = Routes(TWO_TIERS.tiers, "dlq", "resq", max_timeouts)
    asked: list[bool] = []

    def take() -> bool:
        asked.append(True)
        return token

    assert after_timeout(routes, kind, timeouts, take) is expected
    # The bucket is only consulted when the rule would send the record to the DLQ.
    assert bool(asked) == (kind in (Kind.MAIN, Kind.TIER) and 0 < max_timeouts <= timeouts)


@pytest.mark.parametrize(
    ("resq", "tiers", "kind", "expected"),
    [
        ("resq", TWO_TIERS.tiers, Kind.MAIN, (Code.RESQ, 2)),
        ("resq", TWO_TIERS.tiers, Kind.TIER, (Code.RESQ, 2)),
        ("resq", TWO_TIERS.tiers, Kind.RESQ, None),  # no resq from the resq, no tier either
        ("resq", TWO_TIERS.tiers, Kind.DLQ, None),
        ("", TWO_TIERS.tiers, Kind.MAIN, (Code.RETRY, 50)),
        ("", TWO_TIERS.tiers, Kind.TIER, None),  # a tier's record is not rerouted to a tier
        ("", (), Kind.MAIN, None),
    ],
)
def test_head_of_line_rules(resq, tiers, kind, expected) -> None:
    assert hol_rule(Routes(tiers, "dlq", resq, 0), kind) == expected


def test_in_memory_backoff_doubles_from_1_ms_to_60_s() -> None:
    assert [backoff_ms(n) for n in (1, 2, 3, 4, 10, 16, 17, 18, 100)] == [
        1,
        2,
        4,
        8,
        512,
        32_768,
        60_000,
        60_000,
        60_000,
    ]


def test_deadline_doubles_per_timeout_up_to_the_limit() -> None:
    assert [timeout_ms(1_000, 30 * 60_000, n) for n in range(4)] == [1_000, 2_000, 4_000, 8_000]
    assert [timeout_ms(1_000, 5_000, n) for n in range(5)] == [1_000, 2_000, 4_000, 5_000, 5_000]
    assert timeout_ms(1_000, 1_000, 3) == 1_000


def test_topic_kinds() -> None:
    assert [TWO_TIERS.kind_of(t) for t in ("orders", "t1", "t2", "resq", "dlq")] == [
        Kind.MAIN,
        Kind.TIER,
        Kind.TIER,
        Kind.RESQ,
        Kind.DLQ,
    ]
