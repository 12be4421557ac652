"""The dispatcher's fault hook: crash the application at a named step, to prove that a crash
there loses nothing. Off unless the environment asks for it; tests and drills only.

    UATU_DISPATCH_FAULT=<step>[:<topic>]

The crash halts the JVM at once (`Runtime.halt`, no shutdown hooks), as a SIGKILL of the driver
would; in local mode the executors die with it. `<topic>` limits it to the query of that topic.
Steps, in the order a micro-batch meets them:

* ``after_tier_produce``: in a dispatch task, right after the first record written to a retry
  tier, the DLQ or the resq is acknowledged (the source offsets are not yet checkpointed);
* ``after_dispatch``: a dispatch task has resolved every record of its range;
* ``before_checkpoint``: on the driver, after the batch's dispatch_stats rows are written and
  before Spark commits the batch's offsets.

After a restart without the variable, the batch that was cut short is dispatched again (its
records are counted in dispatch_stats.redelivered) and every record still ends committed,
skipped or in the DLQ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.errors import ConfigError

ENV = "UATU_DISPATCH_FAULT"
JVM_STEPS = ("after_tier_produce", "after_dispatch")
DRIVER_STEPS = ("before_checkpoint",)


@dataclass(frozen=True)
class Fault:
    step: str
    topic: str = ""  # "" = any topic

    def matches(self, step: str, topic: str) -> bool:
        return self.step == step and (not self.topic or self.topic == topic)


def fault_from_env(env: Mapping[str, str]) -> Fault | None:
    raw = env.get(ENV, "").strip()
    if not raw:
        return None
    step, _, topic = raw.partition(":")
    if step not in JVM_STEPS + DRIVER_STEPS:
        raise ConfigError(ENV, f"{raw!r}: the step must be one of {JVM_STEPS + DRIVER_STEPS}")
    return Fault(step, topic)
