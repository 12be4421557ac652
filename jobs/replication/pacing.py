"""Flow control between micro-batches: keep records/s and bytes/s under the JobGroup's caps.

Spark's Kafka source bounds a batch by records only (maxOffsetsPerTrigger), so the byte cap
is first turned into a record budget from a sampled mean record size
(`preflight.records_per_trigger`); the `Pacer` then corrects for the real sizes. Each batch
occupies the time its records and bytes are allowed to take at the capped rates, counted
from when its copy finished; the job sleeps until that allowance has passed, so the next copy
cannot start before. Measured where the records land (from one batch's last write to the
next's), the rate therefore never exceeds a cap; it falls short by a batch's copy time over
its allowance. Counting from the batch's start instead would let a slow first batch (a cold
JVM) and fast later ones land above a cap. Idle time builds up no credit for a later burst.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Pacer:
    max_records_per_sec: float  # 0 = unlimited
    max_bytes_per_sec: float  # 0 = unlimited
    _free_at: float = 0.0

    def delay(self, copy_finished: float, records: int, nbytes: int, now: float) -> float:
        """Seconds to wait after a batch of `records`/`nbytes` whose copy finished at
        `copy_finished` (`now` is later: the batch's stats were written in between)."""
        cost = 0.0
        if self.max_records_per_sec > 0:
            cost = max(cost, records / self.max_records_per_sec)
        if self.max_bytes_per_sec > 0:
            cost = max(cost, nbytes / self.max_bytes_per_sec)
        self._free_at = max(self._free_at, copy_finished) + cost
        return max(0.0, self._free_at - now)
