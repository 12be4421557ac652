"""The `Launcher` contract, and the `LaunchRecord` the store keeps for every application.

Every launcher has the same calls: `launch(group, definition, env)` starts one Spark
application for a JobGroup and returns its `LaunchRecord`; `observes(record)` says whether
this launcher, in this process, can see and stop that application (a local process on
another host cannot be); `alive(record)` says whether it still runs; `cancel(record)` stops
it (gracefully first) and returns once it is gone. `env` is extra environment for the
application (control-plane address, worker id) that the reconciler builds.

An application the launcher does not observe is watched through its own heartbeats and
stopped with a CANCEL in the reply to them (controlplane/reconciler.py, workers.py).

Implementations: `local.py` (spark-submit.sh in a process group), `standalone.py` (a Spark
standalone master's REST API) and `kubernetes.py` (a Spark Operator SparkApplication).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

# A launcher's own facts about its application (pid, driver id, namespace, stop file, ...):
# JSON scalars, read only by the launcher that wrote them.
Details = Mapping[str, str | int | float | bool | None]


@dataclass(frozen=True)
class LaunchRecord:
    """One launched application of one JobGroup, as the store keeps it.

    The launcher fills `handle` (its name for the application: a pid, a driver id,
    namespace/name), `log` and `details`; the reconciler adds `worker_id` (the random id
    reserved for the application's heartbeats) with the digest of its secret, and counts
    `failures` across relaunches.
    """

    handle: str  # "" while `intent`: the launch is decided, not yet confirmed
    definition: str  # reconcile.definition_of the JobGroup it runs
    started_at: float  # POSIX seconds
    log: str  # where its output goes (a path, or the command that shows it)
    details: Details = field(default_factory=lambda: MappingProxyType({}))
    worker_id: int | None = None
    # SHA-256 (hex) of the per-launch secret the application proves itself with; the secret
    # itself goes only to the application (UATU_WORKER_SECRET), never into the store.
    worker_secret_sha256: str | None = None
    failures: int = 0  # relaunches in a row after the application died
    gave_up: bool = False  # failures passed the limit; no more relaunches
    # Written (fenced) before the launcher is called, replaced by the launcher's record after
    # it: a leader deposed in between leaves an intent, never an unrecorded application.
    intent: bool = False
    # Set when the application must stop but this replica cannot stop it itself; its
    # heartbeats are then answered with CANCEL.
    cancel_requested: bool = False

    def replace(self, **changes: Any) -> LaunchRecord:
        return dataclasses.replace(self, **changes)

    def detail(self, name: str) -> Any:
        """A launcher detail; KeyError naming the handle when the record lacks it."""
        try:
            return self.details[name]
        except KeyError:
            raise KeyError(f"launch record {self.handle!r} has no {name!r}") from None

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["details"] = dict(self.details)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> LaunchRecord:
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        # Records written before this dataclass were flat dicts: launcher facts at top level.
        details = {**data.pop("details", {}), **{k: v for k, v in data.items() if k not in names}}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, details=MappingProxyType(details))


def launch_details(**values: str | int | float | bool | None) -> Details:
    """Immutable details for a LaunchRecord."""
    return MappingProxyType(dict(values))


class Launcher(Protocol):
    def observes(self, record: LaunchRecord) -> bool:
        """True when `alive` and `cancel` work for `record` from this process."""
        ...

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """Start the group's application; raises LaunchFailed when it cannot."""
        ...

    def alive(self, record: LaunchRecord) -> bool:
        """True while the application runs (or may: a launcher that cannot tell says True)."""
        ...

    def cancel(self, record: LaunchRecord) -> None:
        """Stop the application, gracefully first; return once it has ended."""
        ...


__all__ = ["Details", "LaunchRecord", "Launcher", "launch_details"]
