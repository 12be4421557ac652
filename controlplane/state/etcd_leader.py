"""Leader election on etcd: whoever holds a lease-backed key leads (the `Leadership` contract).

A background thread campaigns: grant a lease, then one txn "if the key does not exist, put
our address on it, attached to the lease". The winner refreshes the lease every ttl/3 and
checks the key is still the one it created; the losers revoke their lease and poll the key,
campaigning again once it is gone (deleted on resign, or expired with the old leader's lease).

Guarantees and limits:

* `is_leader()` is computed from the clock, not from the thread: leadership is valid until
  the moment the last successful keepalive was *sent* plus the TTL etcd granted. etcd expires
  the lease no sooner than that, so a leader cut off from etcd, or whose thread is stuck in
  a hung call, stops believing it leads before anyone else can win.
* That relies on clocks running at the same rate; a process paused between `is_leader()`
  and a write can still write late. Launch writes are therefore fenced: `fence()` gives the
  (key, create_revision) that `EtcdStore` compares in the same txn as the write.
* `stop()` resigns by revoking the lease, which deletes the key: a follower takes over
  within its poll interval instead of a TTL.
* etcd's minimum lease TTL is about 1.5 election timeouts (1.5 s by default); a shorter
  `ttl_seconds` is rounded up by etcd and the granted TTL is the one used.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from controlplane.errors import StoreUnavailable
from controlplane.state import etcd_client as ops
from controlplane.state.etcd_client import EtcdAccess, EtcdClient

log = logging.getLogger("uatu.leader")


class EtcdLeadership:
    """Campaign for `name` in the etcd at `endpoint`, advertising `address` (host:port).

    Thread-safe. `start()` returns at once; `stop()` resigns and joins the thread.
    """

    def __init__(
        self,
        endpoint: str | EtcdAccess,
        address: str,
        name: str = "/uatu/leader",
        ttl_seconds: int = 5,
        poll_seconds: float | None = None,
    ) -> None:
        self.address = address
        self.name = name
        self.ttl_seconds = ttl_seconds
        # Followers notice a vanished key within one poll; a quarter TTL keeps takeover after
        # a crash close to the TTL itself.
        self._poll = poll_seconds if poll_seconds is not None else min(0.5, ttl_seconds / 4)
        # A call may not outlive a third of the TTL: the keepalive after it must still fit.
        self._etcd = EtcdClient(endpoint, timeout=max(0.5, ttl_seconds / 3))
        self._key = name.encode()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease = 0
        self._created = 0  # create_revision of our key while we lead
        self._valid_until = 0.0  # time.monotonic() after which our lease may have expired

    # --- the Leadership contract -------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"leader:{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._etcd.close()

    def is_leader(self) -> bool:
        with self._lock:
            return self._created != 0 and time.monotonic() < self._valid_until

    def leader(self) -> str | None:
        """Our address while we lead, else the key's value; None if unknown or unreachable."""
        if self.is_leader():
            return self.address
        try:
            kv = self._etcd.get(self._key)
        except StoreUnavailable:
            return None
        return kv.value.decode() if kv else None

    def fence(self) -> tuple[str, int] | None:
        """(leader key, its create_revision) while we lead, for `EtcdStore`; else None."""
        with self._lock:
            if self._created != 0 and time.monotonic() < self._valid_until:
                return self.name, self._created
        return None

    # --- the campaign thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._campaign():
                    self._lead()
                else:
                    self._follow()
            except StoreUnavailable as e:
                self._step_down_if_expired()
                log.warning("leader election for %s: %s", self.name, e)
                self._stopping.wait(self._poll)
            except Exception:
                # The thread must survive anything: a dead campaign thread means a follower
                # that never takes over, or a leader that never notices it lost.
                log.exception("leader election for %s failed; retrying", self.name)
                self._lost("unexpected error in the election thread")
                self._stopping.wait(self._poll)
        self._resign()

    def _campaign(self) -> bool:
        sent = time.monotonic()
        granted = self._etcd.call("lease/grant", {"TTL": str(self.ttl_seconds)})
        lease, ttl = int(granted["ID"]), int(granted["TTL"])
        try:
            answer = self._etcd.txn(
                [ops.created_at(self._key, 0)],
                [ops.put(self._key, self.address.encode(), lease=lease)],
                [ops.get(self._key)],
            )
        except StoreUnavailable:
            # The put may have landed without us knowing: revoking frees the key for the
            # next round now instead of after a TTL (and expiry does it if this fails too).
            with contextlib.suppress(StoreUnavailable):
                self._revoke(lease)
            raise
        if not answer.get("succeeded"):
            # Someone leads: an unused lease would only linger until its TTL.
            self._revoke(lease)
            return False
        with self._lock:
            self._lease, self._created, self._valid_until = lease, ops.revision(answer), sent + ttl
        log.info(
            "became leader for %s as %s (lease %x, ttl %d s)", self.name, self.address, lease, ttl
        )
        return True

    def _lead(self) -> None:
        """Keep the lease alive every ttl/3 until it is lost, the key changes, or stop()."""
        while not self._stopping.wait(self._refresh_interval()):
            try:
                if not self._keep_alive():
                    self._lost("lease expired")
                    return
                kv = self._etcd.get(self._key)
                if kv is None or kv.create_revision != self._created:
                    self._lost("leader key was deleted or replaced")
                    return
            except StoreUnavailable as e:
                if self._step_down_if_expired():
                    return
                log.warning("leader keepalive for %s failed, retrying: %s", self.name, e)

    def _follow(self) -> None:
        """Poll until the leader key is gone (or stop()); the caller then campaigns again."""
        while not self._stopping.wait(self._poll):
            if not int(self._etcd.range(self._key, count_only=True).get("count", 0)):
                return

    def _keep_alive(self) -> bool:
        sent = time.monotonic()
        answer = self._etcd.call("lease/keepalive", {"ID": str(self._lease)})
        # An expired or revoked lease comes back without a TTL.
        ttl = int(answer.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            return False
        with self._lock:
            self._valid_until = sent + ttl
        return True

    def _refresh_interval(self) -> float:
        return max(0.1, self.ttl_seconds / 3)

    def _step_down_if_expired(self) -> bool:
        with self._lock:
            expired = self._created != 0 and time.monotonic() >= self._valid_until
        if expired:
            self._lost("no keepalive answered within the lease TTL")
        return expired

    def _lost(self, why: str) -> None:
        """Step down (if leading) and release the lease; safe to call when not leading."""
        with self._lock:
            lease, leading = self._lease, self._created != 0
            self._created, self._lease, self._valid_until = 0, 0, 0.0
        if not leading:
            return
        log.warning("lost leadership for %s: %s", self.name, why)
        # If etcd still holds the lease (keepalives timed out, etcd is back), the key would
        # block the next leader for a whole TTL: release it now, best effort.
        with contextlib.suppress(StoreUnavailable, ops.EtcdRequestFailed):
            self._revoke(lease)

    def _resign(self) -> None:
        with self._lock:
            lease, leading = self._lease, self._created != 0
            self._created, self._lease, self._valid_until = 0, 0, 0.0
        if lease:
            try:
                self._revoke(lease)
            except StoreUnavailable as e:
                log.warning("could not resign %s (the lease will expire): %s", self.name, e)
                return
        if leading:
            log.info("resigned leadership for %s", self.name)

    def _revoke(self, lease: int) -> None:
        try:
            self._etcd.call("lease/revoke", {"ID": str(lease)})
        except ops.EtcdRequestFailed as e:
            if e.code != 5:  # NOT_FOUND: already expired, which is what we wanted
                raise
