"""Who may reconcile and answer admin calls: the `Leadership` contract.

With several control-plane replicas exactly one is the leader. Followers answer admin calls
with FAILED_PRECONDITION naming the leader (as uForwarder's master does) and do not
reconcile. `SoleLeader` is the single-replica case (the embedded SQLite store);
`controlplane/state/etcd_leader.py` campaigns for a lease-backed key in etcd.
"""

from __future__ import annotations

from typing import Protocol


class Leadership(Protocol):
    def start(self) -> None:
        """Begin campaigning (in the background); returns at once."""

    def stop(self) -> None:
        """Stop campaigning and resign, so a follower takes over without waiting a lease."""

    def is_leader(self) -> bool: ...

    def leader(self) -> str | None:
        """The leader's advertised gRPC address (host:port), None while nobody leads."""


class SoleLeader:
    """One replica, always the leader."""

    def __init__(self, address: str) -> None:
        self.address = address

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def is_leader(self) -> bool:
        return True

    def leader(self) -> str | None:
        return self.address
