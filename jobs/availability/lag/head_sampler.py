"""Broker head offsets, sampled every second in a driver thread, each sample stamped with the
time it was fetched (Burrow's `offset-refresh`, at 1 s instead of its default 10 s).

A commit's lag is the partition's head when the commit was made minus the committed offset.
The micro-batch sees commits seconds after they were made, so it asks `HeadHistory.at` for
the head at the commit's time: interpolated between the samples just before and just after
it, which are a second apart. A commit older than the first sample of its partition has no
known lag (None), which is what Burrow does with a commit it has no head for.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from core.kafka_admin import ADMIN_TIMEOUT_S

log = logging.getLogger("uatu.availability")

TopicPartitionKey = tuple[str, int]
REFRESH_S = 1.0
KEEP_MS = 300_000  # longer than any trigger interval a job would use


def head_offsets(
    admin: AdminClient, partitions: Iterable[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """The latest offset of each partition; partitions that fail to answer are left out."""
    request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in sorted(partitions)}
    if not request:
        return {}
    heads = {}
    for tp, future in admin.list_offsets(request, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            heads[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException as e:
            log.warning("head offset of %s[%d] unavailable: %s", tp.topic, tp.partition, e)
    return heads


class HeadHistory:
    """Timed head samples per partition, the last `keep_ms` of them. Thread-safe.

    Samples arrive in time order, so each partition keeps two sorted lists and `at` is a
    binary search: it runs once per commit, with hundreds of samples kept per partition.
    A group's commits come in time order and many groups commit to a partition between two
    samples, so `at` also remembers, per partition, the last pair of samples it interpolated
    between (forgotten at every `add`) and answers from it without the search or the lock.
    """

    def __init__(self, keep_ms: int = KEEP_MS) -> None:
        self.keep_ms = keep_ms
        self._times: dict[TopicPartitionKey, list[int]] = {}
        self._heads: dict[TopicPartitionKey, list[int]] = {}
        # tp -> (t0, t1, h0, h1): samples at t0 and t1 (t1 None: t0 is the newest) with no
        # sample in between. Replaced whole, so a reader without the lock sees one or another.
        self._last: dict[TopicPartitionKey, tuple[int, int | None, int, int]] = {}
        self._lock = threading.Lock()

    def add(self, at_ms: int, heads: Mapping[TopicPartitionKey, int]) -> None:
        with self._lock:
            self._last = {}
            for tp, head in heads.items():
                times = self._times.setdefault(tp, [])
                values = self._heads.setdefault(tp, [])
                times.append(at_ms)
                values.append(head)
                # Always keep two, so a quiet partition can still be interpolated.
                old = min(bisect.bisect_left(times, at_ms - self.keep_ms), len(times) - 2)
                if old > 0:
                    del times[:old], values[:old]

    def at(self, tp: TopicPartitionKey, at_ms: int) -> int | None:
        """The head at `at_ms`: interpolated between the samples around it, the newest sample
        when it is later than all, None when it is earlier than all."""
        last = self._last.get(tp)
        if last is not None:
            t0, t1, h0, h1 = last
            if t0 <= at_ms and (t1 is None or at_ms < t1):
                return h0 if t1 is None else h0 + round((h1 - h0) * (at_ms - t0) / (t1 - t0))
        with self._lock:
            times = self._times.get(tp)
            if not times:
                return None
            values = self._heads[tp]
            i = bisect.bisect_right(times, at_ms)
            if i == 0:
                return None
            t0, h0 = times[i - 1], values[i - 1]
            if i == len(times):
                self._last[tp] = (t0, None, h0, h0)
                return h0
            t1, h1 = times[i], values[i]
            if t1 == t0:  # two samples at one time; the search never lands between them
                return h0
            self._last[tp] = (t0, t1, h0, h1)
        return h0 + round((h1 - h0) * (at_ms - t0) / (t1 - t0))

    def latest(self) -> dict[TopicPartitionKey, int]:
        with self._lock:
            return {tp: values[-1] for tp, values in self._heads.items() if values}

    def known(self) -> set[TopicPartitionKey]:
        with self._lock:
            return set(self._times)


class HeadSampler:
    """Samples the heads of the watched partitions every `refresh_s` into `history`."""

    def __init__(self, admin: AdminClient, refresh_s: float = REFRESH_S) -> None:
        self.admin = admin  # librdkafka clients are thread-safe: the job's own is shared
        self.refresh_s = refresh_s
        self.history = HeadHistory()
        self._watched: set[TopicPartitionKey] = set()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="head-sampler", daemon=True)

    def watch(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Sample these partitions from now on; ones never sampled are sampled at once."""
        new = set(partitions) - self._watched
        self._watched = self._watched | new
        if new:
            self.sample(new)

    def sample(self, partitions: Iterable[TopicPartitionKey]) -> None:
        start = time.time()
        heads = head_offsets(self.admin, partitions)
        # The broker answered somewhere between request and response.
        self.history.add(int((start + time.time()) / 2 * 1000), heads)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(ADMIN_TIMEOUT_S + self.refresh_s)

    def _loop(self) -> None:
        while not self._stopping.wait(self.refresh_s):
            try:
                self.sample(self._watched)
            except KafkaException as e:
                log.warning("head offsets not sampled: %s", e)
