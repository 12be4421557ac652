"""LinkedIn Burrow from Debian's ``burrow`` package (1.2.1), run on loopback next to our brokers.

The integration tests run it side by side with the availability job's consumer-lag evaluator
(``tests/jobs/availability/test_burrow_side_by_side.py``). The binary is unpacked into the
repo, not installed system-wide (``make burrow`` runs ``install``)::

    python -m devservices.burrow install            # -> var/burrow/bin/burrow
    python -m devservices.burrow up --bootstrap 127.0.0.1:9092 --zookeeper 127.0.0.1:2181
    python -m devservices.burrow status|down        # [--dir var/burrow/run]

Tests use :func:`start_burrow` (the ``burrow`` fixture)::

    with start_burrow(tmp_path / "burrow", kafka.bootstrap_servers, zookeeper.connect) as b:
        b.group_status("my-group")    # GET /v3/kafka/local/consumer/my-group/status
        b.groups()                    # GET /v3/kafka/local/consumer

Layout of a Burrow dir: ``burrow.toml`` (written on every start), ``burrow.out`` (its log,
zap JSON lines on stdout), ``burrow.pid`` (while it runs), ``burrow.ports`` (its HTTP port),
``burrow-own.pid`` (the pid file Burrow itself insists on writing).

What Burrow 1.2.1 needs to watch a Kafka 3.9 KRaft cluster:

* a ``[zookeeper]`` section, even with no ZooKeeper-based cluster: Burrow keeps its own state
  there (``devservices.zookeeper`` runs one);
* ``kafka-version`` at most ``2.1.0``, the newest its client (sarama 1.22) knows; Kafka 3.9
  still answers those request versions (4.0 drops some of them, KIP-896);
* ``__consumer_offsets`` must exist before it starts, or its consumer module exits
  ("failed to get partition count"); :func:`start_burrow` creates it first.

Its consumer module then starts one sarama partition consumer per ``__consumer_offsets``
partition, one after another, and each start waits behind the previous partition's fetch
long-poll: with the default 50 partitions it reads its first commit many seconds after
starting. :func:`start_burrow` waits for that too (``warm_up``), by committing offset 0
of ``__consumer_offsets``[0] for a group that the broker stores in the partition started last,
``burrow-warmup-<n>``, and returning once Burrow lists that group.

The knobs :func:`start_burrow` writes, with their Burrow defaults (``[section] name``):

=====================================  ==================  ==================================
``[cluster.X] offset-refresh``         30 s                how often the brokers' head
                                                           offsets are fetched; here 1 s
``[cluster.X] topic-refresh``          60 s                how often the topic list is
                                                           fetched; here 2 s (commits to a
                                                           topic Burrow does not know yet are
                                                           dropped)
``[consumer.X] group-blacklist``       none                regexp of groups to ignore (later
                                                           Burrows call it group-denylist)
``[consumer.X] group-whitelist``       none                regexp of the only groups to keep
                                                           (later: group-allowlist)
``[consumer.X] offsets-topic``         __consumer_offsets  the topic of commit records it
                                                           reads (a bench points it at a
                                                           topic of its own)
``[storage.default] intervals``        10                  commits kept per partition: the
                                                           evaluation window
``[storage.default] min-distance``     0 s                 a commit sooner than this after
                                                           the previous one replaces it
``[storage.default] expire-group``     604800 s            a group silent this long is gone
``[evaluator.default] expire-cache``   10 s                how long a group's status is
                                                           cached; here 1 s
``[evaluator.default]                  0                   partitions with a less complete
minimum-complete``                                         window are reported OK
=====================================  ==================  ==================================
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from core.paths import VAR_DIR
from devservices._debian import DebPackageError, install_from_deb
from devservices._service import (
    HOST,
    LocalService,
    Port,
    ServiceCli,
    ServiceError,
    read_ports,
    stopped_on_failure,
)

log = logging.getLogger("uatu.burrow")

DEFAULT_BINARY = VAR_DIR / "burrow" / "bin" / "burrow"
DEFAULT_DIR = VAR_DIR / "burrow" / "run"
READY_TIMEOUT_S = 30.0
WARM_UP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
KAFKA_VERSION = "2.1.0"
"""The newest Kafka protocol version Burrow 1.2.1's client (sarama 1.22) speaks."""

_PACKAGE = "burrow"
_MEMBER = "usr/bin/Burrow"
_OFFSETS_TOPIC = "__consumer_offsets"
_HTTP_TIMEOUT_S = 5.0


class BurrowError(ServiceError):
    """Burrow could not be installed, did not start, or did not answer in time."""


@dataclass(frozen=True)
class BurrowSettings:
    """What :func:`start_burrow` writes into ``burrow.toml`` (see the module docstring)."""

    cluster: str = "local"
    intervals: int = 10
    min_distance_s: int = 0
    expire_group_s: int = 604_800
    offset_refresh_s: int = 1
    topic_refresh_s: int = 2
    expire_cache_s: int = 1
    minimum_complete: float = 0.0
    group_denylist: str | None = None
    group_allowlist: str | None = None
    offsets_topic: str = _OFFSETS_TOPIC
    kafka_version: str = KAFKA_VERSION
    log_level: str = "info"


class Burrow(LocalService):
    """One Burrow process serving its HTTP API on ``port``; ready once ``/burrow/admin``
    answers ``GOOD``."""

    error = BurrowError
    ready_timeout = READY_TIMEOUT_S
    stop_timeout = STOP_TIMEOUT_S
    poll_interval = 0.25
    port = Port("http")

    def __init__(self, dir: Path, port: int = 0, settings: BurrowSettings | None = None) -> None:
        super().__init__(dir, "burrow", ports={"http": port})
        self.settings = settings or BurrowSettings()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    @property
    def own_pid_path(self) -> Path:
        """Burrow's own pid file ([general] pidfile): it refuses to start while the file
        names a live process, so it must not be ours."""
        return self.dir / "burrow-own.pid"

    def ready(self) -> bool:
        return self.healthy()

    def describe(self) -> str:
        return self.url

    def get(self, path: str) -> dict[str, Any]:
        """GET ``path`` of Burrow's HTTP API, parsed. A 404 is an answer too (Burrow says
        what it did not find in the body); other errors raise :class:`BurrowError`."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=_HTTP_TIMEOUT_S) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise BurrowError(f"GET {path}: HTTP {e.code}") from e
            body = json.load(e)
        except (OSError, ValueError) as e:
            raise BurrowError(f"GET {path}: {e}") from e
        if not isinstance(body, dict):
            raise BurrowError(f"GET {path}: not a JSON object: {body!r}")
        return body

    def group_status(self, group: str, all_partitions: bool = False) -> dict[str, Any]:
        """The group's evaluation, Burrow's ``ConsumerGroupStatus`` as JSON.

        Keys: ``status`` (NOTFOUND, OK, WARN, ERR), ``complete``, ``totallag``,
        ``partition_count``, ``maxlag`` and ``partitions``: each with ``topic``,
        ``partition``, ``status`` (OK, WARN, STOP, STALL, REWIND), ``current_lag``,
        ``complete``, and ``start``/``end`` (the window's oldest and newest commit:
        ``offset``, ``timestamp`` in ms, ``lag`` when committed). ``partitions`` holds only
        the partitions that are not OK (``/status``), or all of them if ``all_partitions``
        (``/lag``).
        """
        quoted = urllib.parse.quote(group, safe="")
        view = "lag" if all_partitions else "status"
        status = self.get(f"/v3/kafka/{self.cluster}/consumer/{quoted}/{view}").get("status")
        if not isinstance(status, dict):
            raise BurrowError(f"no status for group {group!r} in Burrow's answer")
        return status

    def groups(self) -> list[str]:
        """The consumer groups Burrow has stored commits for."""
        return list(self.get(f"/v3/kafka/{self.cluster}/consumer").get("consumers") or [])

    def topics(self) -> list[str]:
        """The topics Burrow knows from its last topic refresh."""
        return list(self.get(f"/v3/kafka/{self.cluster}/topic").get("topics") or [])

    def topic_offsets(self, topic: str) -> list[int]:
        """The head offset of each partition of ``topic`` as Burrow last fetched it."""
        quoted = urllib.parse.quote(topic, safe="")
        return list(self.get(f"/v3/kafka/{self.cluster}/topic/{quoted}").get("offsets") or [])

    def healthy(self) -> bool:
        """True if ``/burrow/admin`` answers ``GOOD``."""
        try:
            with urllib.request.urlopen(f"{self.url}/burrow/admin", timeout=1.0) as resp:
                return bool(resp.read().strip() == b"GOOD")
        except OSError:
            return False


def install(binary: Path = DEFAULT_BINARY) -> Path:
    """Put Debian's Burrow binary at ``binary`` unless it is already there; return its path."""
    try:
        return install_from_deb(_PACKAGE, _MEMBER, binary)
    except DebPackageError as e:
        raise BurrowError(str(e)) from e


def start_burrow(
    burrow_dir: Path,
    bootstrap_servers: str,
    zookeeper_connect: str,
    cluster: str = "local",
    *,
    settings: BurrowSettings | None = None,
    binary: Path = DEFAULT_BINARY,
    warm_up: bool = True,
    timeout: float = READY_TIMEOUT_S,
    port: int = 0,
) -> Burrow:
    """Start Burrow watching ``bootstrap_servers`` as cluster ``cluster``; return once it answers.

    The HTTP API listens on loopback ``port`` (0: a free one). ``settings`` overrides the
    test-sized defaults of :class:`BurrowSettings` (its ``cluster`` gives way to ``cluster``).
    With ``warm_up`` (the default) it also waits until Burrow reads new offset commits (see the
    module docstring). Raises :class:`BurrowError` with the tail of its log if Burrow exits or
    does not answer in time; it is stopped in that case.
    """
    if not binary.exists():
        raise BurrowError(f"no Burrow binary at {binary}; run `make burrow`")
    chosen = settings or BurrowSettings()
    if chosen.cluster != cluster:
        chosen = dataclasses.replace(chosen, cluster=cluster)
    burrow = Burrow(burrow_dir, port, chosen)
    _ensure_offsets_topic(bootstrap_servers)
    burrow.dir.mkdir(parents=True, exist_ok=True)
    # Left behind by a SIGKILLed run it would name a dead or, worse, a reused pid.
    burrow.own_pid_path.unlink(missing_ok=True)
    (burrow.dir / "burrow.toml").write_text(
        burrow_toml(burrow, bootstrap_servers, zookeeper_connect)
    )
    burrow.start([str(binary), "-config-dir", str(burrow.dir)], timeout=timeout)
    if warm_up:
        with stopped_on_failure(burrow):
            took = _warm_up(burrow, bootstrap_servers, WARM_UP_TIMEOUT_S)
        log.info("Burrow reads commits (warm-up took %.1f s)", took)
    return burrow


def burrow_toml(burrow: Burrow, bootstrap_servers: str, zookeeper_connect: str) -> str:
    """The ``burrow.toml`` :func:`start_burrow` writes for ``burrow``."""
    s = burrow.settings
    servers = [b.strip() for b in bootstrap_servers.split(",") if b.strip()]
    zookeepers = [z.strip() for z in zookeeper_connect.split(",") if z.strip()]
    groups = ""
    if s.group_denylist is not None:
        groups += f"group-blacklist={_str(s.group_denylist)}\n"
    if s.group_allowlist is not None:
        groups += f"group-whitelist={_str(s.group_allowlist)}\n"
    return f"""\
# Written by devservices/burrow.py on every start; edits are lost.
[general]
pidfile={_str(str(burrow.own_pid_path))}

[logging]
level={_str(s.log_level)}

[zookeeper]
servers={json.dumps(zookeepers)}
timeout=6
root-path={_str(f"/burrow-{burrow.port}")}

[client-profile.uatu]
client-id="burrow-uatu"
kafka-version={_str(s.kafka_version)}

[cluster.{s.cluster}]
class-name="kafka"
servers={json.dumps(servers)}
client-profile="uatu"
topic-refresh={s.topic_refresh_s}
offset-refresh={s.offset_refresh_s}

[consumer.{s.cluster}]
class-name="kafka"
cluster={_str(s.cluster)}
servers={json.dumps(servers)}
client-profile="uatu"
start-latest=false
offsets-topic={_str(s.offsets_topic)}
{groups}
[httpserver.default]
address={_str(f"{HOST}:{burrow.port}")}

[storage.default]
class-name="inmemory"
workers=4
intervals={s.intervals}
min-distance={s.min_distance_s}
expire-group={s.expire_group_s}

[evaluator.default]
class-name="caching"
expire-cache={s.expire_cache_s}
minimum-complete={s.minimum_complete}
"""


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition that stores ``group``'s commits: Kafka's
    ``Utils.abs(group.hashCode()) % partitions``, with Java's String.hashCode."""
    h = 0
    for unit in _utf16_units(group):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def _str(value: str) -> str:
    # A TOML basic string takes the same escapes as a JSON string.
    return json.dumps(value)


def _ensure_offsets_topic(bootstrap_servers: str, timeout: float = 60.0) -> int:
    """Make the broker create ``__consumer_offsets`` (a group-coordinator lookup does);
    return its partition count."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": "burrow-offsets-topic-check"}
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                consumer.committed([TopicPartition(_OFFSETS_TOPIC, 0)], timeout=10.0)
                metadata = consumer.list_topics(_OFFSETS_TOPIC, timeout=10.0)
                return len(metadata.topics[_OFFSETS_TOPIC].partitions)
            except KafkaException as e:
                starting = e.args[0].code() in _COORDINATOR_STARTING
                if not starting or time.monotonic() > deadline:
                    raise BurrowError(f"{_OFFSETS_TOPIC} not available: {e}") from e
                time.sleep(0.5)
    finally:
        consumer.close()


_COORDINATOR_STARTING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def _warm_up(burrow: Burrow, bootstrap_servers: str, timeout: float) -> float:
    """Commit for a group stored in the last ``__consumer_offsets`` partition, which Burrow
    starts reading last, and wait until Burrow lists the group; return the seconds waited."""
    partitions = _ensure_offsets_topic(bootstrap_servers)
    group = next(
        name
        for name in (f"burrow-warmup-{i}" for i in itertools.count())
        if offsets_partition(name, partitions) == partitions - 1
    )
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(_OFFSETS_TOPIC, 0, 0)], asynchronous=False)
    finally:
        consumer.close()

    def lists_group() -> bool:
        try:
            return group in burrow.groups()
        except BurrowError:
            return False  # a slow answer is not yet an answer

    return burrow.wait_ready(timeout, lists_group, f"list the warm-up group {group}")


# --- CLI -------------------------------------------------------------------------------------


def _recorded(dir: Path) -> list[Burrow]:
    ports = read_ports(dir, "burrow")
    return [Burrow(dir, ports["http"])] if ports else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, host:port,...")
    up.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, host:port,...")
    up.add_argument("--cluster", default="local", help="cluster name in its API (default: local)")
    up.add_argument("--port", type=int, default=8000, help="HTTP port (default: 8000)")


def _start(args: argparse.Namespace) -> list[Burrow]:
    return [start_burrow(args.dir, args.bootstrap, args.zookeeper, args.cluster, port=args.port)]


main = ServiceCli(
    "devservices.burrow", __doc__, DEFAULT_DIR, _recorded, _start, _up_arguments, install
).main


if __name__ == "__main__":
    sys.exit(main())
