"""Leader election on a real etcd: one leader, hand-over on resign, crash and partition, fencing.

Every wait polls with a deadline; the deadlines are the guarantees (TTL plus slack for a
loaded two-core machine), not measured durations.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controlplane.errors import NotLeader
from controlplane.launchers.base import LaunchRecord
from controlplane.state.etcd_client import EtcdClient, b64
from controlplane.state.etcd_leader import EtcdLeadership
from controlplane.state.etcd_store import EtcdStore
from core.paths import ROOT
from devservices.etcd import EtcdServer, start_etcd

pytestmark = pytest.mark.integration

TTL = 2  # seconds; etcd's minimum is about 1.5
SLACK = 3.0  # seconds of scheduling delay tolerated on a busy machine

# A campaigner in its own process, so the test can SIGKILL it like a crashed control plane.
_CAMPAIGNER = """
import sys, threading
from controlplane.state.etcd_leader import EtcdLeadership
endpoint, address, name, ttl = sys.argv[1:5]
EtcdLeadership(endpoint, address, name=name, ttl_seconds=int(ttl)).start()
threading.Event().wait()
"""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `predicate` until true; return the seconds it took, fail after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout:.1f} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def election() -> str:
    """A leader key of its own for each test: the session's etcd is shared."""
    return f"/test/{uuid.uuid4().hex}/leader"


@pytest.fixture
def campaigners(etcd: EtcdServer, election: str) -> Iterator[list[EtcdLeadership]]:
    """Three replicas campaigning for `election`; all stopped at the end."""
    replicas = [
        EtcdLeadership(etcd.endpoint, f"127.0.0.1:{8100 + i}", name=election, ttl_seconds=TTL)
        for i in range(3)
    ]
    try:
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()


def leaders(replicas: list[EtcdLeadership]) -> list[EtcdLeadership]:
    return [r for r in replicas if r.is_leader()]


def test_exactly_one_of_three_leads_and_all_name_it(campaigners: list[EtcdLeadership]) -> None:
    assert all(r.leader() is None for r in campaigners)
    for replica in campaigners:
        replica.start()

    wait_for(lambda: len(leaders(campaigners)) == 1, TTL + SLACK, "one leader")
    (leader,) = leaders(campaigners)
    # Stable: no second leader appears over a few keepalive rounds.
    deadline = time.monotonic() + TTL
    while time.monotonic() < deadline:
        assert leaders(campaigners) == [leader]
        time.sleep(0.1)
    assert [r.leader() for r in campaigners] == [leader.address] * 3
    assert leader.fence() is not None
    assert [r.fence() for r in campaigners if r is not leader] == [None, None]


def test_stop_resigns_and_a_follower_takes_over_within_the_ttl(
    campaigners: list[EtcdLeadership],
) -> None:
    for replica in campaigners:
        replica.start()
    wait_for(lambda: len(leaders(campaigners)) == 1, TTL + SLACK, "one leader")
    (old,) = leaders(campaigners)

    old.stop()

    assert not old.is_leader()
    followers = [r for r in campaigners if r is not old]
    # Resigning revokes the lease, so this takes a follower poll, not a TTL.
    wait_for(lambda: len(leaders(followers)) == 1, TTL, "a follower leads after stop()")
    (new,) = leaders(followers)
    assert old.leader() == new.address


def test_a_sigkilled_leader_is_replaced_after_its_lease_expires(
    etcd: EtcdServer, election: str, campaigners: list[EtcdLeadership]
) -> None:
    crashed_address = "127.0.0.1:8199"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CAMPAIGNER, etcd.endpoint, crashed_address, election, str(TTL)],
        cwd=ROOT,
    )
    try:
        follower = campaigners[0]
        # Python start-up (grpc, protobuf imports) is slow on a busy machine.
        wait_for(lambda: follower.leader() == crashed_address, 60, "the subprocess leads")
        follower.start()
        assert not follower.is_leader()

        proc.send_signal(signal.SIGKILL)
        proc.wait()

        took = wait_for(follower.is_leader, TTL + SLACK, "the follower leads after SIGKILL")
        print(f"takeover after SIGKILL of the leader: {took:.2f} s (ttl {TTL} s)")
        assert follower.leader() == follower.address
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_leader_cut_off_from_etcd_stops_believing_it_leads(tmp_path: Path) -> None:
    # Its own etcd: the test freezes it with SIGSTOP, so every call hangs until timeout.
    server = start_etcd(tmp_path / "etcd")
    assert server.process is not None
    leader = EtcdLeadership(server.endpoint, "127.0.0.1:8101", ttl_seconds=TTL)
    try:
        leader.start()
        wait_for(leader.is_leader, TTL + SLACK, "it leads")

        server.process.send_signal(signal.SIGSTOP)
        # Its last keepalive was sent before the SIGSTOP, so its lease is over by then + TTL
        # however stuck its thread is; the slack only covers this thread's own polling.
        wait_for(lambda: not leader.is_leader(), TTL + 0.25, "it stops leading within the TTL")
        assert leader.fence() is None

        server.process.send_signal(signal.SIGCONT)
        wait_for(leader.is_leader, 3 * TTL + SLACK, "it leads again once etcd is back")
    finally:
        server.process.send_signal(signal.SIGCONT)
        leader.stop()
        server.stop()


def test_fenced_launch_writes_of_a_deposed_leader_fail_with_not_leader(
    etcd: EtcdServer, election: str, campaigners: list[EtcdLeadership]
) -> None:
    a, b = campaigners[:2]
    prefix = f"/test/{uuid.uuid4().hex}"

    def store_for(fence: Callable[[], tuple[str, int] | None]) -> EtcdStore:
        return EtcdStore(etcd.endpoint, prefix, fence, leader_key=election)

    a.start()
    wait_for(a.is_leader, TTL + SLACK, "a leads")
    b.start()
    store_a = store_for(a.fence)
    store_a.put_launch("g1", record(1))
    token = a.fence()
    assert token is not None
    # A leader that paused right after checking: it still holds the old token.
    paused = store_for(lambda: token)

    # Depose a, as an expired lease would: delete its key. Either replica may win the
    # next round; a re-elected `a` gets a new create_revision, so the token is stale anyway.
    operator = EtcdClient(etcd.endpoint)
    operator.call("kv/deleterange", {"key": b64(election)})

    def elected() -> EtcdLeadership | None:
        # Until `a` notices, it still believes it leads: wait for the winner of a new round.
        kv = operator.get(election.encode())
        for replica in (a, b):
            fence = replica.fence()
            if kv is not None and fence is not None and fence[1] == kv.create_revision:
                return replica
        return None

    wait_for(lambda: elected() is not None, TTL + SLACK, "a newly elected leader")
    leader = elected()
    assert leader is not None
    (follower,) = [r for r in (a, b) if r is not leader]
    wait_for(lambda: follower.fence() is None, TTL + SLACK, "the other one steps down")
    operator.close()

    with pytest.raises(NotLeader, match=f"not the leader; the leader is {leader.address}") as e:
        paused.put_launch("g1", record(2))
    assert e.value.leader == leader.address
    with pytest.raises(NotLeader):
        paused.delete_launch("g1")
    # The follower knows it does not lead and names the leader without trying.
    with pytest.raises(NotLeader, match=leader.address):
        store_for(follower.fence).put_launch("g1", record(3))

    assert store_for(leader.fence).launches() == {"g1": record(1)}
    store_for(leader.fence).put_launch("g1", record(4))
    assert store_for(leader.fence).launches() == {"g1": record(4)}


def record(pid: int) -> LaunchRecord:
    return LaunchRecord(str(pid), "def", 0.0, "app.log", {"pid": pid})
