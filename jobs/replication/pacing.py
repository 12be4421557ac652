"""Flow control between micro-batches: keep records/s and bytes/s under the JobGroup's caps.

Spark's Kafka source bounds a batch by records only (maxOffsetsPerTrigger), so the byte cap
is first turned into a record budget from a sampled mean record size
(`preflight.records_per_trigger`); the `Pacer` then corrects for the real sizes. Each batch
occupies the time its records and bytes are allowed to take at the capped rates, starting
when the batch started or when the previous batch's allowance ran out, whichever is later;
the job sleeps until that allowance has passed. Over any stretch of time the rate stays
within one batch of the caps, and idle time does not build up credit for a later burst.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Pacer:
    max_records_per_sec: float  # 0 = unlimited
    max_bytes_per_sec: float  # 0 = unlimited
    _free_at: float = 0.0

    def delay(self, batch_started: float, records: int, nbytes: int, now: float) -> float:
        """Seconds to wait after a batch of `records`/`nbytes` that started at `batch_started`."""
        cost = 0.0
        if self.max_records_per_sec > 0:
            cost = max(cost, records / self.max_records_per_sec)
        if self.max_bytes_per_sec > 0:
            cost = max(cost, nbytes / self.max_bytes_per_sec)
        self._free_at = max(self._free_at, batch_started) + cost
        return max(0.0, self._free_at - now)
