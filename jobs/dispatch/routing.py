"""uForwarder's routing of a dispatch outcome, as pure functions (uForwarder's own is
`DispatcherImpl.dispatcherResponseFromGrpcStatus` and what each code then does).

This module is the specification the JVM dispatcher follows: the status and trailer tables
below are handed to it as they are (`jvm/src/main/java/dev/uatu/dispatch/Routing.java`), and
its rules are compared with the functions here over every input by
`tests/jobs/dispatch/test_dispatch_jvm.py`.

One call's answer becomes a `Code` (`response_code`):

=================================================================  =================
gRPC status (no ``kafka-action`` trailer)                          code
=================================================================  =================
OK                                                                 COMMIT
ALREADY_EXISTS                                                     SKIP
RESOURCE_EXHAUSTED                                                 RETRY
NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION, ABORTED,         DLQ
OUT_OF_RANGE, DATA_LOSS
DEADLINE_EXCEEDED; UNAVAILABLE past the call's deadline            BACKOFF (timeout)
every other status (UNKNOWN, CANCELLED, UNAVAILABLE in time, ...)  INVALID (retry in
                                                                   memory)
=================================================================  =================

On an error status the trailer ``kafka-action`` overrides the table: ``Retry`` -> RETRY,
``Stash`` -> DLQ, ``Skip`` -> SKIP, any other non-empty value -> INVALID. On OK the trailer is
not read (uForwarder reads trailers only in its error path).

A timeout (BACKOFF) then becomes (`after_timeout`): DLQ for a record of the DLQ topic (it stays
there); INVALID for a record of the resq topic; DLQ when ``max_rpc_timeouts`` > 0, the record has
already timed out that many times, and the partition's DLQ token bucket allows it; else RETRY.
The record's timeout count then goes up by one, which doubles its next deadline.

RETRY, DLQ and RESQ increment the record's retry count and go to a topic (`destination`):

* DLQ -> ``dlq_topic``; without one, as RETRY;
* RETRY -> the first tier (sorted by ``processing_delay_ms``) whose cumulative ``max_retry_count``
  covers the new retry count; past the last tier the DLQ, or the last tier without a DLQ;
  without tiers the DLQ;
* RESQ -> the resq topic if enabled;
* nowhere ("") -> retried in memory, as INVALID is, with a backoff of 1 ms doubling to 60 s.

Example (uForwarder's integration test): 2 tiers of ``max_retry_count`` 2 and a DLQ; a record the
service always refuses with RESOURCE_EXHAUSTED is called once from the source (retry count 0 ->
1: tier 1), twice from tier 1 (-> 2: tier 1, -> 3: tier 2), twice from tier 2 (-> 4: tier 2,
-> 5: the DLQ): 5 calls, then a 6th when the DLQ is redriven.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import grpc


class Code(StrEnum):
    """uForwarder's DispatcherResponse.Code as far as the dispatcher uses it."""

    COMMIT = "COMMIT"
    SKIP = "SKIP"
    RETRY = "RETRY"
    DLQ = "DLQ"
    RESQ = "RESQ"
    BACKOFF = "BACKOFF"
    INVALID = "INVALID"


class Kind(StrEnum):
    """What a physical topic is to the JobGroup."""

    MAIN = "MAIN"  # the JobGroup's source topic
    TIER = "TIER"  # a retry tier
    RESQ = "RESQ"  # the resilience queue
    DLQ = "DLQ"  # the DLQ (only a redrive JobGroup reads it)


ACTION_TRAILER = "kafka-action"

# Every gRPC status name -> its code when no trailer overrides it. UNAVAILABLE is INVALID here
# and BACKOFF past the deadline (`response_code`).
STATUS_CODES: dict[str, Code] = {
    "OK": Code.COMMIT,
    "ALREADY_EXISTS": Code.SKIP,
    "RESOURCE_EXHAUSTED": Code.RETRY,
    "NOT_FOUND": Code.DLQ,
    "INVALID_ARGUMENT": Code.DLQ,
    "FAILED_PRECONDITION": Code.DLQ,
    "ABORTED": Code.DLQ,
    "OUT_OF_RANGE": Code.DLQ,
    "DATA_LOSS": Code.DLQ,
    "DEADLINE_EXCEEDED": Code.BACKOFF,
    "UNAVAILABLE": Code.INVALID,
    "UNKNOWN": Code.INVALID,
    "CANCELLED": Code.INVALID,
    "UNIMPLEMENTED": Code.INVALID,
    "INTERNAL": Code.INVALID,
    "PERMISSION_DENIED": Code.INVALID,
    "UNAUTHENTICATED": Code.INVALID,
}
assert set(STATUS_CODES) == {s.name for s in grpc.StatusCode}, "one entry per gRPC status"

# The `kafka-action` trailer values uForwarder's client sets (ConsumerResponse).
TRAILER_CODES: dict[str, Code] = {"Retry": Code.RETRY, "Stash": Code.DLQ, "Skip": Code.SKIP}

# uForwarder's Failsafe policy for in-memory retries and for produces: 1 ms doubling to 60 s.
BACKOFF_MAX_MS = 60_000

# Head-of-line (BlockingQueueStubManager): the share of a partition's records that must be
# resolved before the rest count as blocking, and the token cost of each kind of reroute.
HOL_MIN_ACKED = 0.98
HOL_COST_RESQ = 2
HOL_COST_RETRY = 50


def response_code(status: str, trailer: str | None, overdue: bool) -> Code:
    """The code of one finished call: its status name, its `kafka-action` trailer (None when
    absent) and whether it ended past its deadline."""
    if status == "OK":
        return Code.COMMIT
    if trailer:
        return TRAILER_CODES.get(trailer, Code.INVALID)
    if status == "UNAVAILABLE":
        return Code.BACKOFF if overdue else Code.INVALID
    return STATUS_CODES.get(status, Code.INVALID)


@dataclass(frozen=True)
class Tier:
    topic: str
    delay_ms: int
    max_retry_count: int
    # Its position in the JobGroup's retry_config.retry_queues (tiers are used sorted by delay,
    # but errors name the field the user wrote).
    index: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Routes:
    """The JobGroup's destinations: tiers sorted by delay, the DLQ and resq ("" when none)."""

    tiers: tuple[Tier, ...]
    dlq_topic: str
    resq_topic: str
    max_rpc_timeouts: int

    def kind_of(self, topic: str) -> Kind:
        if self.dlq_topic and topic == self.dlq_topic:
            return Kind.DLQ
        if self.resq_topic and topic == self.resq_topic:
            return Kind.RESQ
        if any(t.topic == topic for t in self.tiers):
            return Kind.TIER
        return Kind.MAIN


def sort_tiers(tiers: Sequence[Tier]) -> tuple[Tier, ...]:
    """Tiers in uForwarder's order: by processing delay (a stable sort keeps equal delays in
    the order given)."""
    return tuple(sorted(tiers, key=lambda t: t.delay_ms))


def after_timeout(
    routes: Routes, kind: Kind, timeout_count: int, dlq_token: Callable[[], bool]
) -> Code:
    """What a timeout (BACKOFF) becomes; `timeout_count` is the count before this timeout and
    `dlq_token` takes a token of the partition's DLQ bucket (called only when it matters)."""
    if kind is Kind.DLQ:
        return Code.DLQ
    if kind is Kind.RESQ:
        return Code.INVALID
    if routes.max_rpc_timeouts > 0 and timeout_count >= routes.max_rpc_timeouts and dlq_token():
        return Code.DLQ
    return Code.RETRY


def retry_topic(routes: Routes, retry_count: int) -> str:
    """The tier for a record's retry count (after this failure's increment)."""
    if not routes.tiers:
        return routes.dlq_topic
    ceiling = 0
    for tier in routes.tiers:
        ceiling += tier.max_retry_count
        if retry_count <= ceiling:
            return tier.topic
    return routes.dlq_topic or routes.tiers[-1].topic


def destination(routes: Routes, code: Code, retry_count: int) -> str:
    """Where a RETRY, DLQ or RESQ goes; "" means an in-memory retry."""
    if code is Code.DLQ:
        return routes.dlq_topic or retry_topic(routes, retry_count)
    if code is Code.RETRY:
        return retry_topic(routes, retry_count)
    if code is Code.RESQ:
        return routes.resq_topic
    return ""


def hol_rule(routes: Routes, kind: Kind) -> tuple[Code, int] | None:
    """Where a head-of-line blocking record of a `kind` topic goes, and the tokens it costs:
    the resq if there is one (not from the resq itself), else a retry tier (only from the
    source topic); never from the DLQ."""
    if kind is Kind.DLQ:
        return None
    if kind is not Kind.RESQ and routes.resq_topic:
        return Code.RESQ, HOL_COST_RESQ
    if kind is Kind.MAIN and routes.tiers:
        return Code.RETRY, HOL_COST_RETRY
    return None


def backoff_ms(retries: int) -> int:
    """The wait before in-memory retry number `retries` (1-based)."""
    if retries <= 1:
        return 1
    return BACKOFF_MAX_MS if retries > 17 else min(BACKOFF_MAX_MS, 1 << (retries - 1))


def timeout_ms(rpc_timeout_ms: int, limit_ms: int, timeout_count: int) -> int:
    """A call's deadline after `timeout_count` timeouts: doubled per timeout, capped."""
    timeout = max(1, min(rpc_timeout_ms, limit_ms))
    for _ in range(timeout_count):
        if timeout >= limit_ms:
            break
        timeout = min(limit_ms, timeout * 2)
    return timeout


def invocations_until_dlq(routes: Routes) -> int:
    """Calls a record gets when the service always answers RETRY, from its first dispatch from
    the source until it lands in the DLQ (the DLQ's own redrive not included). ValueError when
    it never does (no DLQ: it cycles in the last tier, or in memory)."""
    if not routes.dlq_topic:
        raise ValueError("without a DLQ an always-retried record never leaves the tiers")
    calls, retry_count = 1, 0
    while True:
        retry_count += 1
        topic = destination(routes, Code.RETRY, retry_count)
        if topic == routes.dlq_topic:
            return calls
        calls += 1
