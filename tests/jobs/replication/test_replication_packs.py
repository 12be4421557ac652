"""Replication packs (jobs/replication/packs.py) on a real broker, in this process: several
replication groups in one query, whose membership changes between runs, against the truth of
what was sent.

Each step sends a known number of records to every source topic, then runs packs `--once`.
After every step each destination holds exactly its source's records, once each and in
order; each group's replication_stats rows count every record of its topic once as
replicated, none as already present (a range read again by a new generation would show
there), and name no other group's topic; each group's consumer group has committed its
topic's end. A generation is deleted once no member's ledger names it, and not before.

The crash points: stats saved and then the query failed before Spark committed the batch
(the new generation must start after that batch, not where Spark's commit log ends, and
append them), a new generation failing before it appended the stats it inherited (the
crashed generation is kept, and the next generation inherits the duty), a batch whose stats
were written before Spark's commit (the tables' marker says it was copied), and a crash
between a new generation's file and its members' ledgers. A group that ran the low-latency
copy joins where that copy's own progress log ends.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from core import faults
from core.config import load_settings
from core.errors import EXIT_FAILED, EXIT_OK, MovedToPack
from core.faults import FaultInjected
from jobs import registry
from jobs.replication import tables
from jobs.replication.job import ReplicationJob
from jobs.replication.packs import alone_spec, form_pack
from jobs.replication.progress_log import ProgressLog
from jobs.replication.spec import ReplicationSpec
from jobs.replication.stats import StatsWriter
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.pack_generations import LEDGER
from jobs.runtime.template import WriteId
from testing.conf import write_conf_dir
from testing.jobgroups import replication_group
from testing.topic_data import Record, committed_offsets, produce_records, read_partitions

pytestmark = pytest.mark.integration

PARTITIONS = 2


class Site:
    """Source and destination topics on the session broker, a warehouse, and the truth of
    what was sent."""

    def __init__(self, kafka, tmp_path: Path, name: str, topics: int) -> None:
        self.kafka = kafka
        base = tmp_path / name
        conf = write_conf_dir(base / "conf", kafka.bootstrap_servers, base / "wh", base / "ck")
        self.settings = load_settings(conf)
        self.stats_table = base / "wh" / "replication_stats"
        self.groups = {f"{name}-g{i}": f"{name}-{tmp_path.name[-12:]}-t{i}" for i in range(topics)}
        for topic in self.groups.values():
            kafka.create_topic(topic, partitions=PARTITIONS)
            kafka.create_topic(f"{topic}.copy", partitions=PARTITIONS)
        self.sent: dict[str, dict[int, list[bytes]]] = {
            t: {p: [] for p in range(PARTITIONS)} for t in self.groups.values()
        }
        self._serial = 0

    def spec(self, group_id: str, *, capped: bool = False) -> ReplicationSpec:
        """A continuous copy of the group's topic from the earliest offset, its copied
        offsets committed to `<group>-cg`: what packs; `capped`, with flow control: what
        runs alone."""
        topic = self.groups[group_id]
        group = replication_group(group_id, topic, f"{topic}.copy")
        group.kafka_consumer_task_group.consumer_group = f"{group_id}-cg"
        if capped:
            group.flow_control.messages_per_sec = 5000
        spec = registry.validate(group, self.settings)[1]
        assert isinstance(spec, ReplicationSpec)
        return spec

    def send(self, n: int) -> None:
        """`n` records to every topic, round robin over its partitions, each unique."""
        now = int(time.time() * 1000)
        for topic in self.groups.values():
            records = []
            for i in range(n):
                self._serial += 1
                value = f"{topic}-{self._serial}".encode()
                records.append(Record(i % PARTITIONS, b"k", value, now))
                self.sent[topic][i % PARTITIONS].append(value)
            produce_records(self.kafka.bootstrap_servers, topic, records)

    def run(self, spark, *group_ids: str) -> tuple[int, str]:
        """One pack of `group_ids`, run --once: its exit status and checkpoint."""
        spec = form_pack(spark, [self.spec(g) for g in group_ids], self.settings.checkpoints)
        job = ReplicationJob(spec)
        job.check()
        return job.run_on(spark, once=True), spec.output.checkpoint

    def run_alone(self, spark, group_id: str) -> int:
        """The group on its own checkpoint, --once, as spark-submit.sh runs it."""
        job = ReplicationJob(self.spec(group_id))
        job.check()
        return job.run_on(spark, once=True)

    def run_capped(self, spark, group_id: str) -> tuple[int, str]:
        """The group given flow control, alone, as a worker runs it (`alone_spec`), --once:
        its exit status and checkpoint."""
        spec = alone_spec(spark, self.spec(group_id, capped=True), self.settings.checkpoints)
        job = ReplicationJob(spec)
        job.check()
        return job.run_on(spark, once=True), spec.output.checkpoint

    def assert_exact(self, spark, *group_ids: str) -> None:
        """The groups' destinations hold their sources' records once each, in order; their
        stats count each once as replicated and their consumer groups committed the ends."""
        bootstrap = self.kafka.bootstrap_servers
        for group in group_ids:
            topic = self.groups[group]
            copied = read_partitions(bootstrap, f"{topic}.copy", PARTITIONS)
            assert {p: [r.value for r in rs] for p, rs in copied.items()} == self.sent[topic]
            ends = {p: len(values) for p, values in self.sent[topic].items()}
            assert committed_offsets(bootstrap, f"{group}-cg", topic, PARTITIONS) == ends
        expected = spark.createDataFrame(
            [
                (group, self.groups[group], p, len(values), len(values), 0)
                for group in group_ids
                for p, values in self.sent[self.groups[group]].items()
            ],
            "job_group_id string, source_topic string, partition int, records_read long, "
            "records_replicated long, records_already_present long",
        )
        stats = (
            spark.read.format("delta")
            .load(str(self.stats_table))
            .where(F.col("job_group_id").isin(*group_ids))
            .groupBy("job_group_id", "source_topic", "partition")
            .agg(*(F.sum(c).alias(c) for c in expected.columns[3:]))
        )
        assert_df_equality(stats, expected, ignore_row_order=True, ignore_nullable=True)


def test_packs_whose_members_change_copy_every_record_once(spark, kafka, tmp_path):
    site = Site(kafka, tmp_path, "rp", topics=3)
    g1, g2, g3 = site.groups

    site.send(20)  # g1 alone, on its own checkpoint
    assert site.run_alone(spark, g1) == EXIT_OK
    site.assert_exact(spark, g1)

    site.send(10)  # g1 goes on in a pack from where its own checkpoint stopped; g2 from earliest
    status, first = site.run(spark, g1, g2)
    assert status == EXIT_OK
    site.assert_exact(spark, g1, g2)

    site.send(5)  # a member added: a new generation, every topic starting where its copy ends
    status, second = site.run(spark, g1, g2, g3)
    assert (status, second != first) == (EXIT_OK, True)
    site.assert_exact(spark, g1, g2, g3)
    assert not Path(first).exists()  # no ledger names it any more

    site.send(7)  # the pack split in two
    assert site.run(spark, g1)[0] == EXIT_OK
    assert Path(second).exists()  # g2's and g3's copies still end there
    status, rest = site.run(spark, g2, g3)
    assert status == EXIT_OK
    assert not Path(second).exists()
    site.assert_exact(spark, g1, g2, g3)

    site.send(3)  # the same members again: the generation their ledgers name, resumed
    assert site.run(spark, g2, g3) == (EXIT_OK, rest)
    with pytest.raises(MovedToPack, match=f"replication group '{g1}' goes on in the pack"):
        site.run_alone(spark, g1)
    assert site.run(spark, g1)[0] == EXIT_OK
    site.assert_exact(spark, g1, g2, g3)

    # g2 given flow control on a worker: it leaves its pack and runs alone, on a generation
    # of its own that starts where its copy ends, not on its stale own checkpoint.
    site.send(4)
    status, alone = site.run_capped(spark, g2)
    assert (status, Path(alone).parent.name) == (EXIT_OK, "alone")
    assert site.run(spark, g3)[0] == EXIT_OK
    assert not Path(rest).exists()
    site.assert_exact(spark, g2, g3)
    again = alone_spec(spark, site.spec(g2, capped=True), site.settings.checkpoints)
    assert again.output.checkpoint == alone  # the same generation, resumed
    site.send(2)  # its cap lifted: back in a pack, from where its copy alone ends
    assert site.run(spark, g1, g2)[0] == EXIT_OK
    assert not Path(alone).exists()
    site.assert_exact(spark, g1, g2)


def fail_once(monkeypatch, point: str) -> None:
    """The next hit of `point` in this process raises (core/faults.py), whatever hit it
    before."""
    faults.reset()
    monkeypatch.setenv(faults.ENV, f"{point}:{faults.FAIL_FIRST_ATTEMPT}")


def crash_after_saving_stats(spark, monkeypatch, site: Site, *group_ids: str) -> str:
    """A pack of `group_ids` whose first batch saves its stats and fails before Spark
    commits it: its checkpoint, nothing in the tables."""
    fail_once(monkeypatch, "replication.stats_saved")
    status, crashed = site.run(spark, *group_ids)
    monkeypatch.delenv(faults.ENV)
    assert status == EXIT_FAILED
    assert read_offset_log(spark, crashed).last_committed is None
    assert (
        not site.stats_table.exists()
        or spark.read.format("delta").load(str(site.stats_table)).count() == 0
    )
    return crashed


def test_a_new_generation_inherits_the_saved_stats_of_a_crash(spark, kafka, tmp_path, monkeypatch):
    site = Site(kafka, tmp_path, "rc", topics=3)
    h1, h2, h3 = site.groups

    site.send(15)
    crashed = crash_after_saving_stats(spark, monkeypatch, site, h1, h2)

    # A new generation starts after the saved batch, and fails before appending its stats:
    # the crashed generation, which no ledger names any more, is kept, and the duty stays in
    # the new generation's file.
    site.send(5)
    fail_once(monkeypatch, "replication.inherited_stats")
    status, failed = site.run(spark, h1, h2, h3)
    monkeypatch.delenv(faults.ENV)
    assert status == EXIT_FAILED
    assert Path(crashed).exists()
    assert json.loads((Path(failed) / LEDGER).read_text())["inherited"] == [crashed]

    # Split in two: the first inherits the duty through the failed generation and appends
    # the saved stats; the crashed generation is then deleted, the failed one with its last
    # member's move.
    site.send(4)
    assert site.run(spark, h1)[0] == EXIT_OK
    assert not Path(crashed).exists()
    assert site.run(spark, h2, h3)[0] == EXIT_OK
    assert not Path(failed).exists()
    site.assert_exact(spark, h1, h2, h3)

    site.send(4)  # a crash between the new generation's file and its members' ledgers
    fail_once(monkeypatch, "replication.pack_ledgers")
    with pytest.raises(FaultInjected):
        site.run(spark, h1, h2)
    monkeypatch.delenv(faults.ENV)
    ledger = Path(site.settings.checkpoints) / h1 / LEDGER
    assert json.loads(ledger.read_text())["checkpoint"] != crashed
    assert site.run(spark, h1, h2)[0] == EXIT_OK
    site.assert_exact(spark, h1, h2)


def test_a_batch_written_before_its_commit_is_not_copied_again(spark, kafka, tmp_path, monkeypatch):
    # A query stopped between its batch's write and Spark's commit of it (its stats written
    # by `drain`, or by `release` under flow control, and their files deleted): the tables'
    # marker says the batch was copied. The state is made as the writer makes it: the saved
    # stats of a crashed batch appended, their files deleted.
    site = Site(kafka, tmp_path, "rw", topics=2)
    w1, w2 = site.groups
    site.send(12)
    crashed = crash_after_saving_stats(spark, monkeypatch, site, w1)
    pack = form_pack(spark, [site.spec(w1)], site.settings.checkpoints)
    writer = StatsWriter(
        dataclasses.replace(pack, routes=()), WriteId(tables.WRITE_ID_PREFIX, crashed)
    )
    try:
        assert writer.batches.recover(spark) == [0]
    finally:
        writer.close()
    assert read_offset_log(spark, crashed).last_committed is None

    site.send(3)
    assert site.run(spark, w1, w2)[0] == EXIT_OK
    site.assert_exact(spark, w1, w2)


@pytest.mark.parametrize("where", ["its own checkpoint", "its generation alone"])
def test_a_group_that_ran_the_low_latency_copy_joins_where_its_log_ends(
    spark, kafka, tmp_path, where
):
    # The low-latency copy keeps its progress in its own log, not in Spark's offset log: a
    # group that ran it and joins a pack starts where its last batch with its stats written
    # ends (batch 1's stats were not written: the pack reads it again), not at `latest`. It
    # ran on its own checkpoint, or on a generation of its own after a pack (`alone_spec`).
    site = Site(kafka, tmp_path, "rl", topics=1)
    (group,) = site.groups
    spec = site.spec(group)
    latest = dataclasses.replace(
        spec, source=dataclasses.replace(spec.source, starting_offsets="latest")
    )
    ran_on = spec.output.checkpoint
    if where == "its generation alone":
        form_pack(spark, [latest], site.settings.checkpoints)  # a pack, never run
        ran_on = alone_spec(spark, latest, site.settings.checkpoints).output.checkpoint
        assert ran_on != spec.output.checkpoint
    log = ProgressLog(spark, ran_on)
    log.write_start({0: 0, 1: 0})
    log.write_batch(0, {0: 0, 1: 0}, {0: 3, 1: 2})
    log.write_commit(0)
    log.write_batch(1, {0: 3, 1: 2}, {0: 5, 1: 5})
    pack = form_pack(spark, [latest], site.settings.checkpoints)
    assert json.loads(pack.source.starting_offsets) == {site.groups[group]: {"0": 3, "1": 2}}
