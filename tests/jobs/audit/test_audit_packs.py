"""Audit packs (jobs/audit/packs.py) on a real broker, in this process: several audit groups in
one query, whose membership changes between runs, against the truth of what was sent.

Each step sends a known number of records to every topic, then runs packs `--once`; after
every step each group's rows of audit_counts hold exactly what was sent to its topic so far,
per partition (message_count and bytes), and no other group's. So a topic read twice by a new
generation (Spark's source reads an added topic from its earliest offset) or a range skipped
between two generations shows at once. A generation is deleted once no member's ledger names
it, and not before.

The crash points: a MERGE that fails after Spark committed its batch (the new generation must
start where the table's counts end, not where Spark's commit log does), and a crash between a
new generation's file and its members' ledgers.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from core import faults
from core.config import load_settings
from core.errors import EXIT_FAILED, EXIT_OK, MovedToPack
from core.faults import FaultInjected
from jobs import registry
from jobs.audit.job import AuditJob
from jobs.audit.packs import LEDGER, alone_spec, form_pack
from jobs.runtime.checkpoint_files import read_offset_log
from testing.conf import write_conf_dir
from testing.demo_data import SentRecord, produce
from testing.jobgroups import audit_group

pytestmark = pytest.mark.integration

PARTITIONS = 2


class Site:
    """Topics on the session broker, a warehouse, and the truth of what was sent."""

    def __init__(self, kafka, tmp_path: Path, name: str, topics: int) -> None:
        self.kafka = kafka
        base = tmp_path / name
        conf = write_conf_dir(base / "conf", kafka.bootstrap_servers, base / "wh", base / "ck")
        self.settings = load_settings(conf)
        self.table = base / "wh" / "audit_counts"
        self.groups = {f"{name}-g{i}": f"{name}-{tmp_path.name[-12:]}-t{i}" for i in range(topics)}
        for topic in self.groups.values():
            kafka.create_topic(topic, partitions=PARTITIONS)
        self.sent: Counter = Counter()  # (group, topic, partition) -> records
        self.bytes: Counter = Counter()
        self._serial = 0

    def spec(self, group_id: str, *, capped: bool = False):
        """An approximate audit of the group's topic from the earliest offset: what packs;
        `capped`, with flow control: what runs alone."""
        rate = 5000 if capped else 0
        group = audit_group(group_id, self.groups[group_id], rate, from_earliest=True)
        return registry.validate(group, self.settings)[1]

    def send(self, n: int) -> None:
        """`n` records to every topic, round robin over its partitions, each unique."""
        now = int(time.time() * 1000)
        for group, topic in self.groups.items():
            records = []
            for i in range(n):
                self._serial += 1
                value = f"{topic}-{self._serial}".encode()
                records.append(SentRecord(i % PARTITIONS, b"k", value, None, now, "on_time"))
                self.sent[(group, topic, i % PARTITIONS)] += 1
                self.bytes[(group, topic, i % PARTITIONS)] += 1 + len(value)
            produce(self.kafka.bootstrap_servers, topic, records)

    def run(self, spark, *group_ids: str) -> tuple[int, str]:
        """One pack of `group_ids`, run --once: its exit status and checkpoint."""
        spec = form_pack(spark, [self.spec(g) for g in group_ids], self.settings.checkpoints)
        return AuditJob(spec).run_on(spark, once=True), spec.output.checkpoint

    def run_capped(self, spark, group_id: str) -> tuple[int, str]:
        """The group given flow control, alone, as a worker runs it (`alone_spec`), --once:
        its exit status and checkpoint."""
        spec = alone_spec(spark, self.spec(group_id, capped=True), self.settings.checkpoints)
        return AuditJob(spec).run_on(spark, once=True), spec.output.checkpoint

    def counted(self, spark) -> dict[tuple[str, str, int], tuple[int, int]]:
        rows = (
            spark.read.format("delta")
            .load(str(self.table))
            .groupBy("job_group_id", "topic", "partition")
            .agg(F.sum("message_count"), F.sum("bytes"))
            .collect()
        )
        return {(r[0], r[1], r[2]): (int(r[3]), int(r[4])) for r in rows}

    def truth(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        return {k: (n, self.bytes[k]) for k, n in self.sent.items()}


def test_packs_whose_members_change_count_every_record_once(spark, kafka, tmp_path):
    site = Site(kafka, tmp_path, "pk", topics=3)
    g1, g2, g3 = site.groups

    site.send(20)  # g1 alone, on its own checkpoint, as spark-submit.sh runs it
    assert AuditJob(site.spec(g1)).run_on(spark, once=True) == EXIT_OK
    assert site.counted(spark) == {k: v for k, v in site.truth().items() if k[0] == g1}

    site.send(10)  # g1 goes on in a pack from where its own checkpoint stopped; g2 from earliest
    status, first = site.run(spark, g1, g2)
    assert status == EXIT_OK
    assert site.counted(spark) == {k: v for k, v in site.truth().items() if k[0] != g3}

    site.send(5)  # a member added: a new generation, every topic starting where its counts end
    status, second = site.run(spark, g1, g2, g3)
    assert (status, second != first) == (EXIT_OK, True)
    assert site.counted(spark) == site.truth()
    assert not Path(first).exists()  # no ledger names it any more

    site.send(7)  # the pack split in two
    assert site.run(spark, g1)[0] == EXIT_OK
    assert Path(second).exists()  # g2's and g3's counts still end there
    status, rest = site.run(spark, g2, g3)
    assert status == EXIT_OK
    assert site.counted(spark) == site.truth()
    assert not Path(second).exists()

    site.send(3)  # the same members again: the generation their ledgers name, resumed
    assert site.run(spark, g2, g3) == (EXIT_OK, rest)
    with pytest.raises(MovedToPack, match=f"audit group '{g1}' goes on in the pack"):
        AuditJob(site.spec(g1)).run_on(spark, once=True)
    site.send(2)
    assert site.run(spark, g1)[0] == EXIT_OK
    assert site.run(spark, g2, g3)[0] == EXIT_OK
    assert site.counted(spark) == site.truth()

    # g2 given flow control on a worker: it leaves its pack and runs alone, on a generation
    # of its own that starts where its counts end, not on its stale own checkpoint; then,
    # its cap lifted, back in a pack from where its counts alone end.
    site.send(4)
    status, alone = site.run_capped(spark, g2)
    assert (status, Path(alone).parent.name) == (EXIT_OK, "alone")
    assert site.run(spark, g3)[0] == EXIT_OK
    assert {k: v for k, v in site.counted(spark).items() if k[0] != g1} == {
        k: v for k, v in site.truth().items() if k[0] != g1
    }
    again = alone_spec(spark, site.spec(g2, capped=True), site.settings.checkpoints)
    assert again.output.checkpoint == alone  # the same generation, resumed
    assert site.run(spark, g1, g2)[0] == EXIT_OK  # g2's counts go on, none counted twice
    assert not Path(alone).exists()
    expected = spark.createDataFrame(
        [(*k, n, b) for k, (n, b) in site.truth().items()],
        "job_group_id string, topic string, partition int, message_count long, bytes long",
    )
    counted = (
        spark.read.format("delta")
        .load(str(site.table))
        .groupBy("job_group_id", "topic", "partition")
        .agg(F.sum("message_count").alias("message_count"), F.sum("bytes").alias("bytes"))
    )
    assert_df_equality(counted, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_new_generation_starts_where_the_counts_end_after_a_crash(
    spark, kafka, tmp_path, monkeypatch
):
    site = Site(kafka, tmp_path, "pc", topics=2)
    h1, h2 = site.groups

    site.send(15)  # the MERGE fails after Spark committed the batch: nothing in the table
    monkeypatch.setenv(faults.ENV, f"audit.counts_merging:{faults.FAIL_FIRST_ATTEMPT}")
    status, crashed = site.run(spark, h1, h2)
    monkeypatch.delenv(faults.ENV)
    assert status == EXIT_FAILED
    assert read_offset_log(spark, crashed).last_committed == 0
    assert site.counted(spark) == {}

    site.send(5)  # re-formed apart: each reads again the batch Spark committed, the table lacks
    assert site.run(spark, h1)[0] == EXIT_OK
    status, apart = site.run(spark, h2)
    assert status == EXIT_OK
    assert site.counted(spark) == site.truth()

    site.send(4)  # a crash between the new generation's file and its members' ledgers
    monkeypatch.setenv(faults.ENV, f"audit.pack_ledgers:{faults.FAIL_FIRST_ATTEMPT}")
    with pytest.raises(FaultInjected):
        site.run(spark, h1, h2)
    monkeypatch.delenv(faults.ENV)
    ledger = Path(site.settings.checkpoints) / h2 / LEDGER
    assert json.loads(ledger.read_text()) == {"checkpoint": apart}
    assert site.run(spark, h1, h2)[0] == EXIT_OK
    assert site.counted(spark) == site.truth()
