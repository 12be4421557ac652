"""Shared fixtures: one SparkSession for the whole run, real Kafka brokers, temp conf dirs.

The session is local[2] with 2 shuffle partitions and the UI off: the machine has 2 cores
and most test frames have a handful of rows.

Tiers: a test that uses the `spark` fixture is marked `spark`, one that uses a real service
fixture (Kafka, etcd, ZooKeeper, kafka-pixy, Burrow) is marked `integration`, so
`make test-unit` (neither) needs no JVM, jars or services. Tests that start services
themselves carry the marks explicitly.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterator

import pytest

from core.paths import C1_ONLY_JIT, ROOT
from core.processes import PORT_SLICE_ENV
from devservices.kafka import SERVICE_JAVA_OPTS_ENV
from testing import cpu_per_test
from testing.spark import (
    conf_restored,
    remove_listeners_added_since,
    small_local_session,
    stop_queries_started_since,
    stop_with_stacks_if_slow,
    streams_listeners,
    suite_java_options,
)

os.environ.setdefault("PYSPARK_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
# Every Spark JVM of the suite (this session's, and each `spark-submit.sh` a test or the
# control plane starts, which inherit the variable) compiles with C1 only: the runs last
# seconds to minutes, and skipping C2 cuts the CPU a driver spends starting up
# (docs/testing.md has the figure). On two cores the suite is bound by CPU, not by waiting.
# Production launches never see this variable. The class-data sharing archive is the one
# spark-submit.sh uses too.
os.environ.setdefault("SPARK_SUBMIT_OPTS", suite_java_options())
# devservices' JVMs: brokers, ZooKeeper, MirrorMaker 2, the standalone cluster's daemons.
os.environ.setdefault(SERVICE_JAVA_OPTS_ENV, C1_ONLY_JIT)
# Each xdist worker picks its services' ports from a slice of its own: two workers starting
# brokers at the same moment cannot pick the same free port (core.processes.free_ports).
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ[PORT_SLICE_ENV] = (
        f"{os.environ['PYTEST_XDIST_WORKER'].removeprefix('gw')}"
        f"/{os.environ['PYTEST_XDIST_WORKER_COUNT']}"
    )


SERVICE_FIXTURES = frozenset({"kafka", "kafka_dest", "etcd", "zookeeper", "kafka_pixy", "burrow"})

# The test files that take longest, longest first, by their tests' summed times in a fresh-clone
# run (pytest --junitxml). With `--dist loadfile` each xdist worker takes the next file in
# collection order when it is free, so these run first and the short files fill in around
# them, instead of one long file running alone at the end while the other worker idles.
LONGEST_FIRST = (
    "tests/jobs/replication/test_replication_low_latency.py",
    "tests/jobs/dispatch/test_dispatch_integration.py",
    "tests/jobs/availability/test_availability_integration.py",
    "tests/jobs/audit/test_audit_faults.py",
    "tests/jobs/replication/test_replication_faults.py",
    "tests/integrations/test_prometheus_scrape.py",
    "tests/integrations/test_airflow.py",
    "tests/controlplane/test_worker_pool.py",
    "tests/examples/test_audit_tiers_demo.py",
    "tests/jobs/test_cluster_hosts.py",
    "tests/controlplane/test_controlplane_e2e.py",
    "tests/jobs/replication/test_replication_integration.py",
    "tests/controlplane/test_launch_failover.py",
    "tests/controlplane/test_standalone_launcher.py",
    "tests/jobs/loadgen/test_loadgen_produce.py",
    "tests/jobs/audit/test_audit_many_topics.py",
    "tests/jobs/test_kafka_sasl_ssl.py",
    "tests/jobs/test_source_faults.py",
    "tests/jobs/availability/test_burrow_side_by_side.py",
    "tests/jobs/test_delta.py",
    "tests/jobs/test_worker_every_type.py",
    "tests/jobs/loadgen/test_loadgen_faults.py",
    "tests/jobs/audit/test_audit_packs.py",
    "tests/jobs/replication/test_replication_packs.py",
    "tests/jobs/audit/test_audit_job_integration.py",
    "tests/jobs/audit/test_tier_audits.py",
    "tests/jobs/availability/test_availability_faults.py",
    "tests/jobs/audit/test_audit_flow_job.py",
    "tests/jobs/audit/test_audit_counts_writer.py",
    "tests/jobs/test_after_commit_slots.py",
    "tests/jobs/test_skip_lost_records.py",
    "tests/jobs/loadgen/test_loadgen_restarts.py",
    "tests/jobs/replication/test_replicate_many_topics.py",
    "tests/jobs/audit/test_tier_faults.py",
    "tests/jobs/audit/test_audit_merge_truth.py",
    "tests/controlplane/test_never_in_two_places.py",
    "tests/jobs/audit/test_tier_clients_integration.py",
    "tests/jobs/audit/test_tier_krp.py",
    "tests/jobs/audit/test_audit_key_retention.py",
    "tests/jobs/test_maintenance.py",
    "tests/integrations/test_delta_without_spark.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        if fixtures & SERVICE_FIXTURES:
            item.add_marker(pytest.mark.integration)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


SLOW_TEARDOWN_S = 20.0


class SlowTeardownWarning(UserWarning):
    """A fixture took more than SLOW_TEARDOWN_S to tear down (shown in the warnings summary,
    which pytest-xdist brings back from its workers): where a suite's idle minutes hide."""


class TeardownTimer:
    """Times every fixture's teardown. A plugin, not a conftest hook: a session fixture's
    hooks are called on the session, which sees only global plugins. Finalizers run
    last-in first-out, so the one added before the fixture runs (and registers its own
    teardown) runs after that teardown, and the one added after runs before it."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        started: list[float] = []

        def finished() -> None:
            if started and (took := time.monotonic() - started[0]) > SLOW_TEARDOWN_S:
                warnings.warn(
                    f"fixture {fixturedef.argname} ({fixturedef.scope}) took {took:.0f} s to "
                    f"tear down after {request.node.nodeid or 'the session'}",
                    SlowTeardownWarning,
                    stacklevel=1,
                )

        fixturedef.addfinalizer(finished)
        try:
            return (yield)
        finally:
            fixturedef.addfinalizer(lambda: started.append(time.monotonic()))


class LeakedQueryWarning(UserWarning):
    """A test left streaming queries running or listeners on the session; they were stopped
    or removed and are named."""


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TeardownTimer(), "uatu-teardown-timer")
    cpu_per_test.register_if_asked(config)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    session = small_local_session("uatu-tests", tmp_path_factory.mktemp("spark-warehouse"))
    yield session
    stacks = tmp_path_factory.getbasetemp() / "spark-stop.jstack"
    if stop_with_stacks_if_slow(session, stacks, SLOW_TEARDOWN_S):
        warnings.warn(
            f"the JVM's threads while the session stopped: {stacks}",
            SlowTeardownWarning,
            stacklevel=1,
        )


@pytest.fixture(autouse=True)
def _spark_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses `spark` leaves the shared session as it found it, so no test depends
    on which ran before it: its runtime conf (in-process job runs write theirs into the
    session), its streaming queries and its streaming listeners. A query or listener a test
    leaves is stopped or removed and named in a LeakedQueryWarning: a query left running
    holds up the session's stop, and every later query's events cross py4j to a listener
    left behind, on the queue the session's stop waits to drain."""
    if "spark" not in request.fixturenames:
        yield
        return
    spark = request.getfixturevalue("spark")
    queries = {q.id for q in spark.streams.active}  # a module fixture's query may outlive a test
    listeners = streams_listeners(spark)
    with conf_restored(spark):
        yield
    leaked = stop_queries_started_since(spark, queries)
    left = remove_listeners_added_since(spark, listeners)
    if leaked or left:
        warnings.warn(
            f"{request.node.nodeid} left streaming queries running: {', '.join(leaked) or '-'}; "
            f"streaming listeners: {', '.join(left) or '-'}",
            LeakedQueryWarning,
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One real KRaft broker on a free loopback port for the whole test session."""
    from devservices.kafka import start_cluster

    cluster = start_cluster(tmp_path_factory.mktemp("kafka"), n_brokers=1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_dest(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A second, independent single-broker cluster: the replication tests' destination."""
    from devservices.kafka import start_cluster

    cluster = start_cluster(tmp_path_factory.mktemp("kafka-dest"), n_brokers=1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One real single-node etcd on a free loopback port (installed into var/etcd if missing)."""
    from devservices.etcd import install, start_etcd

    install()
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One real standalone ZooKeeper (from Kafka's jars) for kafka-pixy and Burrow."""
    from devservices.zookeeper import start_zookeeper

    server = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kafka_pixy(tmp_path_factory: pytest.TempPathFactory, kafka, zookeeper) -> Iterator:
    """One real kafka-pixy in front of `kafka` (groups in `zookeeper`), cluster name "local";
    built into var/kafka-pixy if missing (1 to 2 minutes with a cold Go cache)."""
    from devservices.kafka_pixy import install, start_kafka_pixy

    install()
    pixy = start_kafka_pixy(
        tmp_path_factory.mktemp("kafka-pixy"),
        kafka.bootstrap_servers,
        zookeeper.connect,
        cluster="local",
    )
    try:
        yield pixy
    finally:
        pixy.stop()


@pytest.fixture(scope="session")
def burrow(tmp_path_factory: pytest.TempPathFactory, kafka, zookeeper) -> Iterator:
    """LinkedIn Burrow 1.2.1 (Debian's package, installed into var/burrow if missing) watching
    `kafka` as cluster "local": a 5-commit window, head offsets every second, a 1 s status
    cache. Returns once it reads new commits (15-20 s after it starts)."""
    from devservices.burrow import BurrowSettings, install, start_burrow

    install()
    server = start_burrow(
        tmp_path_factory.mktemp("burrow"),
        kafka.bootstrap_servers,
        zookeeper.connect,
        cluster="local",
        settings=BurrowSettings(intervals=5),
    )
    try:
        yield server
    finally:
        server.stop()
