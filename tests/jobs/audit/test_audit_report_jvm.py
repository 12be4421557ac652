"""The Java audit interceptors' building blocks (jvm/src/main/java/dev/uatu/audit/report/)
against Python's and Spark's, in the session's Spark JVM (build/uatu-jvm.jar, through py4j):

* `XxHash64.dedupeKey` equals Spark's `xxhash64(key, value)` and `core.audit_reports.dedupe_key`
  on many keys and values (every length around XXH64's 4-, 8- and 32-byte steps, nulls);
* an AuditReport the Java tally encodes parses with the generated Python protobuf, and its
  HLL sketch unions with Spark's `hll_sketch_agg(xxhash64(key, value))` over overlapping data:
  the union's estimate is the true distinct count (a different hash would double-count);
* `SendMatcher` gives each acknowledgement the key of its signature's oldest unmatched send.
"""

from __future__ import annotations

import random

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType
from uatu.v1 import audit_report_pb2

from core.audit_reports import dedupe_key

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _inputs() -> list[tuple[bytes | None, bytes | None]]:
    rng = random.Random(17)
    rows: list[tuple[bytes | None, bytes | None]] = []
    for length in [*range(0, 70), 95, 96, 97, 127, 128, 255, 1000, 4099]:
        rows.append((rng.randbytes(length), rng.randbytes(rng.randrange(0, 80))))
        rows.append((None, rng.randbytes(length)))
        rows.append((rng.randbytes(length), None))
    rows.append((None, None))
    rows.append((b"", b""))
    rows += [(b"k%d" % i, b"v%d" % i) for i in range(100)]
    return rows


def _java(spark):
    return spark.sparkContext._jvm.dev.uatu.audit.report


def test_java_dedupe_key_equals_spark_and_python(spark):
    rows = _inputs()
    java = _java(spark).XxHash64
    df = spark.createDataFrame(
        [(i, k, v) for i, (k, v) in enumerate(rows)], "i int, key binary, value binary"
    )
    spark_hashes = {
        r["i"]: r["h"] for r in df.select("i", F.xxhash64("key", "value").alias("h")).collect()
    }
    mismatches = []
    for i, (key, value) in enumerate(rows):
        j = java.dedupeKey(
            None if key is None else bytearray(key), None if value is None else bytearray(value)
        )
        p = dedupe_key(key, value)
        if not (j == p == spark_hashes[i]):
            mismatches.append((i, key, value, j, p, spark_hashes[i]))
    assert len(rows) > 250
    assert mismatches == []


def test_java_report_parses_and_its_hll_unions_with_spark(spark):
    pkg = _java(spark)
    window_ms = 1_700_000_040_000
    java_records = [(b"k%d" % i, b"v%d" % i) for i in range(300)]  # 0..299
    spark_records = [(b"k%d" % i, b"v%d" % i) for i in range(200, 500)]  # 200..499
    tally = pkg.AuditTally(60, 12)
    for key, value in java_records:
        h = pkg.XxHash64.dedupeKey(bytearray(key), bytearray(value))
        tally.add("orders", window_ms + 5, len(key) + len(value), h, 3.0)
    tally.addFailed("orders", window_ms + 7)
    drained = tally.drain()
    assert drained.size() == 1
    entry = next(iter(drained.entrySet()))
    reporter = getattr(pkg, "AuditReports$Reporter")("orders-api", "h1", "inst-1", 1, "")
    raw = pkg.AuditReports.encode(
        reporter, "local", entry.getKey(), 60, entry.getValue(), 12, 7, 1_700_000_100_000
    )
    report = audit_report_pb2.AuditReport.FromString(bytes(raw))
    assert (report.reporter.service, report.reporter.tier, report.cluster, report.topic) == (
        "orders-api",
        audit_report_pb2.TIER_SERVICE,
        "local",
        "orders",
    )
    assert (report.window_start_ms, report.window_seconds, report.sequence) == (
        window_ms,
        60,
        7,
    )
    assert report.message_count == 300 and report.failed_count == 1
    assert report.byte_count == sum(len(k) + len(v) for k, v in java_records)
    assert len(report.latency_kll_sketch) > 0

    spark_sketch = (
        spark.createDataFrame(spark_records, SCHEMA)
        .agg(F.hll_sketch_agg(F.xxhash64("key", "value")).alias("s"))
        .collect()[0]["s"]
    )
    sketches = spark.createDataFrame(
        [(bytes(report.hll_sketch),), (bytes(spark_sketch),)], "s binary"
    )
    row = sketches.agg(
        F.hll_sketch_estimate(F.hll_union_agg("s")).alias("union"),
    ).collect()[0]
    java_alone = spark.createDataFrame([(bytes(report.hll_sketch),)], "s binary").select(
        F.hll_sketch_estimate("s").alias("n")
    )
    assert java_alone.collect()[0]["n"] in range(297, 304)
    assert abs(row["union"] - 500) <= 5  # 500 distinct: the 100 shared records counted once


@pytest.mark.parametrize(
    ("drop", "change", "named"),
    [
        ("uatu.audit.service", {}, "uatu.audit.service"),
        ("uatu.audit.topic", {}, "uatu.audit.topic"),
        (None, {"uatu.audit.lg.k": "30"}, "uatu.audit.lg.k"),
        (None, {"uatu.audit.window.seconds": "soon"}, "uatu.audit.window.seconds"),
        (None, {"uatu.audit.tier": "CONSUMER"}, "uatu.audit.tier"),
        ("bootstrap.servers", {}, "uatu.audit.producer.bootstrap.servers"),
    ],
)
def test_interceptor_settings_refuse_a_bad_value_naming_it(spark, drop, change, named):
    pkg = _java(spark)
    good = {
        "bootstrap.servers": "127.0.0.1:9",
        "uatu.audit.service": "orders-api",
        "uatu.audit.cluster": "local",
        "uatu.audit.topic": "uatu-audit",
    }
    configs = spark.sparkContext._jvm.java.util.HashMap()
    for k, v in {**good, **change}.items():
        if k != drop:
            configs.put(k, v)
    with pytest.raises(Py4JJavaError) as refused:
        getattr(pkg.AuditSettings, "from")(configs, 1)
    assert "ConfigException" in str(refused.value) and named in str(refused.value)
    # The same settings without the bad one are accepted: the case above can fail.
    fine = spark.sparkContext._jvm.java.util.HashMap()
    for k, v in good.items():
        fine.put(k, v)
    settings = getattr(pkg.AuditSettings, "from")(fine, 1)
    assert (settings.service(), settings.windowSeconds(), settings.lgK()) == ("orders-api", 60, 12)


def test_send_matcher_gives_each_signature_its_sends_first_sent_first(spark):
    """Acknowledgements arrive in another order than the sends (other partitions, other
    topics): each signature still gets its own sends' keys, oldest first; one acknowledgement
    more than sends is a miss; sends logged while matching are matched too; never-matched
    sends are pruned after their time to live."""
    matcher = _java(spark).SendMatcher()
    miss = _java(spark).SendMatcher.NO_MATCH
    signatures = [("t", 1000, -1, 10), ("t", 1000, -1, 11), ("u", 1000, -1, 10), ("t", 1001, 3, 10)]
    sent: dict[int, list[int]] = {i: [] for i in range(len(signatures))}
    rng = random.Random(5)
    for n in range(2500):  # beyond the log's and a run's first capacity
        i = rng.randrange(len(signatures))
        sent[i].append(n)
        matcher.sent(*signatures[i], n, 0)
    matched: dict[int, list[int]] = {i: [] for i in range(len(signatures))}
    for i in [2, 0, 3, 1]:
        for _ in sent[i][:-5]:
            matched[i].append(matcher.match(*signatures[i]))
    for n in range(2500, 2510):  # more sends after the log was taken
        sent[0].append(n)
        matcher.sent(*signatures[0], n, 0)
    for i in range(len(signatures)):
        while len(matched[i]) < len(sent[i]):
            matched[i].append(matcher.match(*signatures[i]))
    assert matched == sent
    assert matcher.match(*signatures[0]) == miss
    assert matcher.match("t", 999, -1, 10) == miss

    matcher.sent("t", 5, -1, 1, 42, 1_000)
    matcher.sent("t", 5, -1, 1, 43, 9_000)
    matcher.prune(10_000, 5_000)  # the first is older than 5 s, the second is not
    assert matcher.match("t", 5, -1, 1) == 43
    assert matcher.match("t", 5, -1, 1) == miss
