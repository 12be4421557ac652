"""Overhead of the audit-reporting clients on producer throughput, each against the same
producer without auditing, in the same run, on the same single-broker cluster:

* Java: Kafka's ProducerPerformance (kafka-producer-perf-test) with and without
  ``interceptor.classes=dev.uatu.audit.report.AuditProducerInterceptor``;
* Python: ``clients.AuditedProducer`` (confluent-kafka's Producer with the audit interceptor
  plugin, ``clients/audit_interceptor``) against a bare ``confluent_kafka.Producer`` producing
  the same keyed records as fast as librdkafka's queue allows.

Runs alternate plain / audited (the order flips each round), ``--rounds`` times each; the
figures are the medians and the overhead is ``1 - audited / plain`` records/s; the ratios of
the two runs of each round are printed too.

Targets (issue 17): <= 5 % for the interceptor, <= 15 % for the Python wrapper. Measure on an
otherwise idle machine (the result file records the load average at the start and the end).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    BENCH_DIR,
    bench_parser,
    median,
    parse_args,
    say,
    work_dir,
    write_latest,
    write_result,
)
from bench.kafka_perf import producer_perf, producer_perf_args
from core.paths import PROJECT_JAR, ROOT

NAME = "audit-clients"
AUDIT_TOPIC = "uatu-audit"
QUICK = {"records": 20_000, "rounds": 1}
INTERCEPTOR = "dev.uatu.audit.report.AuditProducerInterceptor"


def overhead(plain: float, audited: float) -> float:
    """1 - audited / plain (positive: the audited producer is slower)."""
    return 1.0 - audited / plain if plain else 0.0


def interceptor_jars(into: Path) -> Path:
    """A folder of links: Kafka's jars, the project's jar and DataSketches (which the
    interceptor needs and a Kafka client lacks)."""
    from devservices.kafka import DEFAULT_JARS_DIR

    into.mkdir()
    pyspark_jars = ROOT / ".venv/lib/python3.11/site-packages/pyspark/jars"
    jars = [*DEFAULT_JARS_DIR.resolve().glob("*.jar"), PROJECT_JAR.resolve()]
    jars += sorted(pyspark_jars.resolve().glob("datasketches-*.jar"))
    for jar in jars:
        (into / jar.name).symlink_to(jar)
    return into


def java_run(
    bootstrap: str, topic: str, records: int, size: int, jars: Path | None
) -> dict[str, Any]:
    props = {"linger.ms": "5", "batch.size": "65536"}
    if jars is not None:
        props.update(
            {
                "interceptor.classes": INTERCEPTOR,
                "uatu.audit.service": "perf",
                "uatu.audit.cluster": "local",
                "uatu.audit.topic": AUDIT_TOPIC,
            }
        )
    args = producer_perf_args(bootstrap, topic, records, size, extra_props=props)
    result = producer_perf(args) if jars is None else producer_perf(args, jars_dir=jars)
    return {"records_per_s": result.records_per_s, "p99_ms": result.p99_ms}


PYTHON_VARIANTS = ("plain", "audited")


def _python_producer(variant: str, config: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    from clients import AuditedProducer, AuditSettings

    if variant == "audited":
        return AuditedProducer(
            config, AuditSettings(service="perf", cluster="local", audit_topic=AUDIT_TOPIC)
        )
    return Producer(config)


def python_run(bootstrap: str, topic: str, records: int, size: int, variant: str) -> float:
    """Records/s of producing `records` keyed records and flushing, with a PYTHON_VARIANTS
    producer."""
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}
    producer = _python_producer(variant, config)
    value = os.urandom(size)
    keys = [b"key-%d" % i for i in range(records)]
    start = time.perf_counter()
    for key in keys:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush()
    elapsed = time.perf_counter() - start
    if variant == "audited":
        producer.close()
    return records / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("bench.audit_clients_bench", __doc__)
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run")
    parser.add_argument("--record-size", type=int, default=200, help="value bytes")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each variant")
    args = parse_args(parser, argv, QUICK)
    from devservices.kafka import start_cluster

    load_start = os.getloadavg()
    figures: dict[str, Any] = {"load_average_start": load_start}
    with work_dir("audit-clients-") as tmp:
        cluster = start_cluster(tmp / "kafka")
        try:
            bootstrap = cluster.bootstrap_servers
            cluster.create_topic(AUDIT_TOPIC, partitions=1)
            jars = interceptor_jars(tmp / "jars")
            java: dict[str, list[dict[str, Any]]] = {"plain": [], "audited": []}
            py: dict[str, list[float]] = {v: [] for v in PYTHON_VARIANTS}
            for round_ in range(args.rounds):
                java_order = ("plain", "audited") if round_ % 2 == 0 else ("audited", "plain")
                for variant in java_order:
                    topic = f"perf-{uuid.uuid4().hex[:8]}"
                    cluster.create_topic(topic, partitions=3)
                    run = java_run(
                        bootstrap,
                        topic,
                        args.records,
                        args.record_size,
                        jars if variant == "audited" else None,
                    )
                    java[variant].append(run)
                    say(f"round {round_ + 1} java {variant}: {run['records_per_s']:,.0f} rec/s")
                # Alternate the order round to round, so no variant always runs first.
                order = PYTHON_VARIANTS if round_ % 2 == 0 else PYTHON_VARIANTS[::-1]
                for variant in order:
                    topic = f"perf-{uuid.uuid4().hex[:8]}"
                    cluster.create_topic(topic, partitions=3)
                    rate = python_run(bootstrap, topic, args.records, args.record_size, variant)
                    py[variant].append(rate)
                    say(
                        f"round {round_ + 1} python {variant}: {rate:,.0f} rec/s "
                        f"({1e6 / rate:.2f} µs/record)"
                    )
        finally:
            cluster.stop()
    for variant in ("plain", "audited"):
        figures[f"java_{variant}_records_per_s"] = median(r["records_per_s"] for r in java[variant])
    for variant in PYTHON_VARIANTS:
        figures[f"python_{variant}_records_per_s"] = median(py[variant])
    us = {v: 1e6 / figures[f"python_{v}_records_per_s"] for v in PYTHON_VARIANTS}
    figures["python_us_per_record"] = us
    figures["java_interceptor_overhead"] = overhead(
        figures["java_plain_records_per_s"], figures["java_audited_records_per_s"]
    )
    figures["python_wrapper_overhead"] = overhead(
        figures["python_plain_records_per_s"], figures["python_audited_records_per_s"]
    )
    # Round by round (the plain and audited runs of one round ran back to back).
    figures["java_audited_to_plain_by_round"] = [
        a["records_per_s"] / p["records_per_s"]
        for p, a in zip(java["plain"], java["audited"], strict=True)
    ]
    figures["python_audited_to_plain_by_round"] = [
        a / p for p, a in zip(py["plain"], py["audited"], strict=True)
    ]
    figures["runs"] = {"java": java, "python": py}
    figures["load_average_end"] = os.getloadavg()
    say(
        f"interceptor overhead {figures['java_interceptor_overhead']:.1%} (target <= 5 %), "
        f"Python wrapper overhead {figures['python_wrapper_overhead']:.1%} (target <= 15 %)"
    )
    say("Python µs/record: " + ", ".join(f"{v} {us[v]:.2f}" for v in PYTHON_VARIANTS))
    for language in ("java", "python"):
        ratios = figures[f"{language}_audited_to_plain_by_round"]
        say(f"{language} audited / plain by round: " + ", ".join(f"{r:.2f}" for r in ratios))
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    write_latest(BENCH_DIR / f"{NAME}-result.json", figures)
    if not args.quick:
        say(f"wrote {write_result(NAME, figures, args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
