"""Overhead of the audit-reporting clients on producer throughput, each against the same
producer without auditing, in the same run, on the same single-broker cluster:

* Java: Kafka's ProducerPerformance (kafka-producer-perf-test) with and without
  ``interceptor.classes=dev.uatu.audit.report.AuditProducerInterceptor``, once on Kafka 3.9's
  clients and tools (the broker's; acknowledgements matched to sends) and once on Kafka 4.1's
  (``var/jars/kafka4``; the acknowledgement gets the record's headers, which carry its dedupe
  key), both against the same 3.9 broker;
* Python: ``clients.AuditedProducer`` (confluent-kafka's Producer with the audit interceptor
  plugin, ``clients/audit_interceptor``) against a bare ``confluent_kafka.Producer`` producing
  the same keyed records as fast as librdkafka's queue allows.

After ``--warmup`` rounds that are not counted (the broker's and the JIT's first minutes), runs
alternate plain / audited (the order flips each round), ``--rounds`` times each; the figures
are the medians and the overhead is ``1 - audited / plain`` records/s; the ratios of the two
runs of each round are printed too. Beside throughput, each run's CPU time per record (the
perf tool's JVM; the Python process with librdkafka's threads) gives the clients' cost on a
figure the machine's scheduling moves less.

Both Java producers run on the same collector (``--gc``): G1 by default, which the JVM picks
on this machine and Kafka's scripts set for their tools. Under the serial collector, which the
bench used first, young collections stop the producer for a large share of a short run, so
every extra object a record allocates costs more there (docs/benchmarks.md, audit clients).

Targets (issue 17): <= 5 % for the interceptor (on either client), <= 15 % for the Python
wrapper. Measure on an otherwise idle machine (the result file records the load average at
the start and the end).
"""

from __future__ import annotations

import os
import resource
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
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
from core.paths import KAFKA4_JARS_DIR, KAFKA_JARS_DIR
from devservices.kafka import G1_GC, SERIAL_GC
from testing.audit_clients import INTERCEPTOR, interceptor_jars

NAME = "audit-clients"
AUDIT_TOPIC = "uatu-audit"
QUICK = {"records": 20_000, "rounds": 1, "warmup": 0}


@dataclass(frozen=True)
class Client:
    """One audited client the bench compares with its plain self."""

    title: str
    target: float  # the most overhead allowed
    kafka_jars: Path | None = None  # a Java client's Kafka jars; None: the Python wrapper


CLIENTS = {
    "java": Client("interceptor, Kafka 3.9 clients", 0.05, KAFKA_JARS_DIR),
    "java41": Client("interceptor, Kafka 4.1 clients", 0.05, KAFKA4_JARS_DIR),
    "python": Client("Python wrapper", 0.15),
}


def overhead(plain: float, audited: float) -> float:
    """1 - audited / plain (positive: the audited producer is slower)."""
    return 1.0 - audited / plain if plain else 0.0


def java_run(
    bootstrap: str, topic: str, records: int, size: int, jars: Path, audited: bool, gc: str
) -> dict[str, Any]:
    """One ProducerPerformance run on the jars in ``jars``, with the interceptor if
    ``audited`` (``jars`` must then hold the project's jar too), its JVM on collector ``gc``."""
    props = {"linger.ms": "5", "batch.size": "65536"}
    if audited:
        props.update(
            {
                "interceptor.classes": INTERCEPTOR,
                "uatu.audit.service": "perf",
                "uatu.audit.cluster": "local",
                "uatu.audit.topic": AUDIT_TOPIC,
            }
        )
    args = producer_perf_args(bootstrap, topic, records, size, extra_props=props)
    cpu_before = _children_cpu_s()
    result = producer_perf(args, jars_dir=jars, gc=gc)
    return {
        "records_per_s": result.records_per_s,
        "p99_ms": result.p99_ms,
        "cpu_us_per_record": (_children_cpu_s() - cpu_before) / records * 1e6,
    }


def _children_cpu_s() -> float:
    """User + system CPU seconds of the finished child processes (the perf tool's JVM)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


VARIANTS = ("plain", "audited")
COLLECTORS = {"g1": G1_GC, "serial": SERIAL_GC}


def _python_producer(variant: str, config: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    from clients import AuditedProducer, AuditSettings

    if variant == "audited":
        return AuditedProducer(
            config, AuditSettings(service="perf", cluster="local", audit_topic=AUDIT_TOPIC)
        )
    return Producer(config)


def python_run(
    bootstrap: str, topic: str, records: int, size: int, variant: str
) -> dict[str, float]:
    """Records/s of producing `records` keyed records and flushing, with a VARIANTS
    producer, and the process's CPU time per record (all its threads: librdkafka's too)."""
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}
    producer = _python_producer(variant, config)
    value = os.urandom(size)
    keys = [b"key-%d" % i for i in range(records)]
    start, cpu_start = time.perf_counter(), time.process_time()
    for key in keys:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if variant == "audited":
        producer.close()
    return {"records_per_s": records / elapsed, "cpu_us_per_record": cpu / records * 1e6}


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("bench.audit_clients_bench", __doc__)
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run")
    parser.add_argument("--record-size", type=int, default=200, help="value bytes")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each variant")
    parser.add_argument(
        "--warmup", type=int, default=1, help="rounds run first and not counted (default 1)"
    )
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"which clients to measure, comma-separated (default: all of {', '.join(CLIENTS)})",
    )
    parser.add_argument(
        "--gc",
        choices=sorted(COLLECTORS),
        default="g1",
        help="the Java producers' collector, plain and audited alike (default g1: the JVM's "
        "own choice here and what Kafka's scripts run; serial: the figures before 2026-11-29)",
    )
    args = parse_args(parser, argv, QUICK)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown or not clients:
        parser.error(f"--clients: unknown {unknown or args.clients!r}; known: {', '.join(CLIENTS)}")
    from devservices.kafka import start_cluster

    load_start = os.getloadavg()
    figures: dict[str, Any] = {"load_average_start": load_start, "java_gc": args.gc}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"plain": [], "audited": []} for name in clients
    }
    with work_dir("audit-clients-") as tmp:
        cluster = start_cluster(tmp / "kafka")
        try:
            bootstrap = cluster.bootstrap_servers
            cluster.create_topic(AUDIT_TOPIC, partitions=1)
            audit_jars = {
                name: interceptor_jars(client.kafka_jars, tmp / f"jars-{name}")
                for name, client in CLIENTS.items()
                if name in clients and client.kafka_jars is not None
            }
            for round_ in range(-args.warmup, args.rounds):
                label = f"round {round_ + 1}" if round_ >= 0 else "warm-up"
                # Alternate the order round to round, so no variant always runs first.
                order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
                for name in clients:
                    client = CLIENTS[name]
                    for variant in order:
                        topic = f"perf-{uuid.uuid4().hex[:8]}"
                        cluster.create_topic(topic, partitions=3)
                        audited = variant == "audited"
                        if client.kafka_jars is not None:
                            jars = audit_jars[name] if audited else client.kafka_jars
                            run = java_run(
                                bootstrap,
                                topic,
                                args.records,
                                args.record_size,
                                jars,
                                audited,
                                COLLECTORS[args.gc],
                            )
                        else:
                            run = python_run(
                                bootstrap, topic, args.records, args.record_size, variant
                            )
                        if round_ >= 0:
                            runs[name][variant].append(run)
                        say(
                            f"{label} {name} {variant}: {run['records_per_s']:,.0f} rec/s, "
                            f"{run['cpu_us_per_record']:.2f} CPU µs/record"
                        )
        finally:
            cluster.stop()
    for name, by_variant in runs.items():
        for variant, measured in by_variant.items():
            for figure in ("records_per_s", "cpu_us_per_record"):
                figures[f"{name}_{variant}_{figure}"] = median(r[figure] for r in measured)
        figures[f"{name}_overhead"] = overhead(
            figures[f"{name}_plain_records_per_s"], figures[f"{name}_audited_records_per_s"]
        )
        figures[f"{name}_cpu_overhead"] = (
            figures[f"{name}_audited_cpu_us_per_record"]
            / figures[f"{name}_plain_cpu_us_per_record"]
            - 1.0
        )
        # Round by round (the plain and audited runs of one round ran back to back).
        figures[f"{name}_audited_to_plain_by_round"] = [
            a["records_per_s"] / p["records_per_s"]
            for p, a in zip(by_variant["plain"], by_variant["audited"], strict=True)
        ]
    figures["runs"] = runs
    figures["load_average_end"] = os.getloadavg()
    for name in clients:
        client = CLIENTS[name]
        ratios = figures[f"{name}_audited_to_plain_by_round"]
        say(
            f"{client.title}: throughput overhead {figures[f'{name}_overhead']:.1%} "
            f"(target <= {client.target:.0%}), CPU per record "
            f"{figures[f'{name}_plain_cpu_us_per_record']:.2f} -> "
            f"{figures[f'{name}_audited_cpu_us_per_record']:.2f} µs "
            f"({figures[f'{name}_cpu_overhead']:+.1%}); audited / plain by round: "
            + ", ".join(f"{r:.2f}" for r in ratios)
        )
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    write_latest(BENCH_DIR / f"{NAME}-result.json", figures)
    if not args.quick:
        say(f"wrote {write_result(NAME, figures, args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
