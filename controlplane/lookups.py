"""Broker lookups (a topic's partition count) off the threads that serve heartbeats.

The admin API validates every AddJobGroup and UpdateJobGroup against the broker, and a
cluster that does not answer makes that call wait for the lookup's timeout. On the gRPC
server's 8 threads, a few such calls at once would starve worker heartbeats past their lease.
`PartitionLookups` wraps the lookup so that:

* it runs on its own small pool (`workers`, 2), never on the caller's thread, with a short
  timeout (`timeout_s`, 5 s) after which the caller gets ClusterUnreachable;
* at most `workers` callers wait at once; any further caller is refused at once with
  LookupsBusy (UNAVAILABLE), so at most that many gRPC threads can ever be waiting on brokers;
* answers are cached per (cluster, topic) for `ttl_s` (30 s), failures (an unreachable
  cluster, a missing topic) for `failure_ttl_s` (10 s): one bad cluster in the conf costs one
  lookup per 10 s, not one per call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from controlplane.errors import LookupsBusy
from core.config import ClusterConfig
from core.errors import ClusterUnreachable, UatuError

Lookup = Callable[..., int]  # (cluster, topic, field, timeout_s=...) -> partitions


class PartitionLookups:
    def __init__(
        self,
        lookup: Lookup,
        *,
        workers: int = 2,
        timeout_s: float = 5.0,
        ttl_s: float = 30.0,
        failure_ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._workers = workers
        self._timeout_s = timeout_s
        self._ttl_s = ttl_s
        self._failure_ttl_s = failure_ttl_s
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="broker-lookup")
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, int | UatuError]] = {}

    def __call__(self, cluster: ClusterConfig, topic: str, field: str) -> int:
        key = (cluster.name, topic)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] > self._clock():
            return _answer(cached[1])
        if not self._slots.acquire(blocking=False):
            raise LookupsBusy(self._workers)
        try:
            future = self._pool.submit(self._lookup, cluster, topic, field, self._timeout_s)
            try:
                result: int | UatuError = future.result(timeout=self._timeout_s + 1.0)
            except UatuError as e:
                result = e
            except FutureTimeout:
                result = ClusterUnreachable(
                    cluster.name, cluster.bootstrap_servers, f"no answer in {self._timeout_s:g} s"
                )
        finally:
            self._slots.release()
        ttl = self._ttl_s if isinstance(result, int) else self._failure_ttl_s
        with self._lock:
            self._cache[key] = (self._clock() + ttl, result)
        return _answer(result)

    def forget(self, cluster: str, topic: str) -> None:
        """Drop a cached answer (the topic was just created or grown)."""
        with self._lock:
            self._cache.pop((cluster, topic), None)


def _answer(result: int | UatuError) -> int:
    if isinstance(result, UatuError):
        raise result
    return result
