"""A real gRPC consumer service whose answers are scripted by the records themselves, for the
dispatcher's tests and demo (built on `clients.consumer_service`, asyncio, in a thread).

A record's value is ``<id>|<plan>``: `plan` is a comma-separated list of answers for its
successive calls (the last one repeats), so the test knows every record's path before it runs:

==================  ===================================================================
answer              what the service does
==================  ===================================================================
ok                  OK (commit)
exists              ALREADY_EXISTS (skip)
retry               RESOURCE_EXHAUSTED (to a retry tier)
fail                FAILED_PRECONDITION (to the DLQ)
t-retry, t-stash,   INTERNAL with the ``kafka-action`` trailer Retry, Stash, Skip (the
t-skip              trailer decides, not the status)
error               raises, so gRPC answers UNKNOWN (an in-memory retry)
slow<ms>            sleeps <ms>, then OK (past a shorter deadline: a timeout)
slowretry<ms>       sleeps <ms>, then RESOURCE_EXHAUSTED (to a retry tier, late)
stuck               raises (UNKNOWN: retried in memory, for ever) unless the record comes
                    from another topic than its original (a retry tier or the resq): OK
==================  ===================================================================

Calls are counted per logical record (topic, partition, offset, from the call's metadata), and
every call is kept (`calls`) with its receive time, so tests compare the dispatcher's behaviour
with the plan computed independently. `peak_in_flight` counts, from the service's side, the
most calls it was answering at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass

import grpc

from clients.consumer_service import Commit, Message, Result, Retry, Skip, Stash, serve_async


@dataclass(frozen=True)
class Call:
    received_s: float  # time.time() when the call arrived
    message: Message
    answer: str

    @property
    def record_id(self) -> str:
        return self.message.value.split(b"|", 1)[0].decode()

    @property
    def origin(self) -> tuple[str, int, int]:
        return self.message.topic, self.message.partition, self.message.offset


def value(record_id: str, plan: str) -> bytes:
    return f"{record_id}|{plan}".encode()


def plan_of(value_bytes: bytes) -> list[str]:
    _, _, plan = value_bytes.partition(b"|")
    return plan.decode().split(",") if plan else ["ok"]


class ScriptedService:
    """Start with `start()`; `address` is then "127.0.0.1:<port>"; `stop()` when done."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._answered: dict[int, float] = {}  # index in `calls` -> time.time() answered
        self._counts: Counter[tuple[str, int, int]] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ScriptedService:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            serve_async(self._handle, "127.0.0.1:0"), self._loop
        )
        self._server, self.port = future.result(timeout=30)
        return self

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(timeout=30)
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> ScriptedService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def peak_in_flight(self, since: int = 0) -> int:
        """The most of the calls from index `since` on that the service was answering at the
        same moment (a call is in flight from its arrival until its answer)."""
        with self._lock:
            spans = [
                (call.received_s, self._answered.get(i, float("inf")))
                for i, call in enumerate(self.calls)
                if i >= since
            ]
        edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
        peak = current = 0
        for _, step in edges:  # at a tie an answer (-1) sorts before an arrival (+1)
            current += step
            peak = max(peak, current)
        return peak

    async def _handle(self, message: Message) -> Result:
        received = time.time()
        key = (message.topic, message.partition, message.offset)
        plan = plan_of(message.value)
        with self._lock:
            n = self._counts[key]
            self._counts[key] += 1
            answer = plan[min(n, len(plan) - 1)]
            index = len(self.calls)
            self.calls.append(Call(received, message, answer))
        try:
            return await _respond(message, answer)
        finally:
            with self._lock:
                self._answered[index] = time.time()


async def _respond(message: Message, answer: str) -> Result:
    if answer.startswith("slowretry"):
        await asyncio.sleep(int(answer[len("slowretry") :]) / 1000)
        return Retry()
    if answer.startswith("slow"):
        await asyncio.sleep(int(answer[4:]) / 1000)
        return Commit()
    if answer == "error" or (answer == "stuck" and message.physical is None):
        raise RuntimeError("scripted failure")
    if answer == "stuck":
        return Commit()
    return _ANSWERS[answer]


_ANSWERS: dict[str, Result] = {
    "ok": Commit(),
    "exists": Skip(),
    "retry": Retry(),
    "fail": Stash(),
    "t-retry": Retry(status=grpc.StatusCode.INTERNAL),
    "t-stash": Stash(status=grpc.StatusCode.INTERNAL),
    "t-skip": Skip(status=grpc.StatusCode.INTERNAL),
}
