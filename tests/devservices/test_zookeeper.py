"""devservices.zookeeper: when a ZooKeeper counts as ready (no JVM: the answers are quoted)."""

from __future__ import annotations

from devservices.zookeeper import serving

SERVING = (
    b"Zookeeper version: 3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c, built on 2024-02-12\n"
    b"Latency min/avg/max: 0/0.0/0\nReceived: 6\nSent: 5\nConnections: 1\nOutstanding: 0\n"
    b"Zxid: 0x0\nMode: standalone\nNode count: 5\n"
)


def test_zookeeper_is_ready_when_srvr_shows_its_mode_not_when_the_port_merely_answers() -> None:
    assert serving(SERVING)
    # What srvr answers while the server still loads (ruok says imok then already), and a
    # port that closed or answered nothing.
    assert not serving(b"This ZooKeeper instance is not currently serving requests\n")
    assert not serving(b"")
    assert not serving(b"imok")
