"""`make demo-dispatch`: the dispatcher job end to end on a machine with nothing else running.

1. starts a real single-node Kafka broker under var/demo-dispatch/kafka on a free port and
   creates `demo-payments` (2 partitions), two retry tiers, a DLQ and a resilience queue;
2. starts a sample consumer service written with `clients.consumer_service` that answers each
   kind of record its own way (below) and remembers every decision it made;
3. produces 60 records, ten of each kind;
4. runs `./spark-submit.sh var/demo-dispatch/dispatch-demo.json --once` (the JobGroup is
   written there, with the service's port; examples/dispatch-demo.json is the same JobGroup
   with a placeholder uri);
5. prints where every record went (committed, skipped, DLQ), checked against the service's own
   last decision for it, the DLQ with its metadata (`clients.dlq_list`), and dispatch_stats;
6. stops the service and the broker (also on failure or Ctrl-C).

The service answers by the record's kind:

=========  =========================================================  =====================
kind       answer                                                     ends
=========  =========================================================  =====================
ok         OK                                                         committed
flaky      Retry the first time, OK from the retry tier               committed (2 calls)
bad        Stash (FAILED_PRECONDITION + kafka-action Stash)           in the DLQ
poison     Retry always                                               in the DLQ after 1 +
                                                                      2 + 2 calls
slow       sleeps 1.5 s the first time (deadline 1 s: a timeout), OK  committed (2 calls)
dup        Skip (ALREADY_EXISTS + kafka-action Skip)                  skipped
=========  =========================================================  =====================
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from clients.consumer_service import Commit, Message, Result, Retry, Skip, Stash, serve_async
from clients.dlq_list import list_records
from core.paths import ROOT
from devservices.kafka import start_cluster
from testing.conf import write_conf_dir
from testing.delta_files import read_append_only
from testing.topic_data import Record, produce_records

log = logging.getLogger("uatu.demo")

DEMO_DIR = ROOT / "var" / "demo-dispatch"
TEMPLATE = Path(__file__).resolve().parent / "dispatch-demo.json"
TOPIC = "demo-payments"
KINDS = ("ok", "flaky", "bad", "poison", "slow", "dup")
EXPECTED_END = {
    "ok": "committed",
    "flaky": "committed",
    "bad": "dlq",
    "poison": "dlq",
    "slow": "committed",
    "dup": "skipped",
}


class SampleService:
    """The demo's consumer service: `handle` is what a service team writes."""

    def __init__(self) -> None:
        self.decisions: dict[str, list[str]] = defaultdict(list)  # record id -> answers
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    async def handle(self, message: Message):
        record_id = message.value.decode()
        kind = record_id.split("-")[0]
        seen = len(self.decisions[record_id])
        result: Result
        if (kind == "flaky" and seen == 0) or kind == "poison":
            answer, result = "retry", Retry()
        elif kind == "bad":
            answer, result = "stash", Stash()
        elif kind == "dup":
            answer, result = "skip", Skip()
        elif kind == "slow" and seen == 0:
            self.decisions[record_id].append("slow (times out)")
            await asyncio.sleep(1.5)
            return Commit()
        else:
            answer, result = "commit", Commit()
        self.decisions[record_id].append(answer)
        return result

    def start(self) -> SampleService:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            serve_async(self.handle, "127.0.0.1:0", consumer_group="payments-svc", topic=TOPIC),
            self._loop,
        )
        self._server, self.port = started.result(timeout=30)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)


def ended(decisions: list[str]) -> str:
    """Where the service's own last answer sent the record."""
    last = decisions[-1]
    if last == "commit":
        return "committed"
    if last == "skip":
        return "skipped"
    return "dlq"  # stash, or retry after the last tier


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep var/demo-dispatch afterwards")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    DEMO_DIR.mkdir(parents=True)
    kafka = start_cluster(DEMO_DIR / "kafka")
    service = SampleService().start()
    try:
        for topic, partitions in (
            (TOPIC, 2),
            (f"{TOPIC}-retry-1", 2),
            (f"{TOPIC}-retry-2", 2),
            (f"{TOPIC}-dlq", 1),
            (f"{TOPIC}-resq", 1),
        ):
            kafka.create_topic(topic, partitions, 1)
        now = int(time.time() * 1000)
        records = [
            Record(i % 2, f"key-{i}".encode(), f"{kind}-{i}".encode(), now)
            for i, kind in enumerate(k for k in KINDS for _ in range(10))
        ]
        produce_records(kafka.bootstrap_servers, TOPIC, records)
        log.info(
            "produced %d records to %s; the service listens on %d",
            len(records),
            TOPIC,
            service.port,
        )
        conf = write_conf_dir(
            DEMO_DIR / "conf", kafka.bootstrap_servers, DEMO_DIR / "wh", DEMO_DIR / "ck"
        )
        group = json.loads(TEMPLATE.read_text())
        group["rpcDispatcherTaskGroup"]["uri"] = f"dns:///127.0.0.1:{service.port}"
        jobgroup = DEMO_DIR / "dispatch-demo.json"
        jobgroup.write_text(json.dumps(group, indent=2))
        command = [str(ROOT / "spark-submit.sh"), str(jobgroup), "--once", "--conf-dir", str(conf)]
        log.info("running: %s", " ".join(command))
        status = subprocess.run(command, env=dict(os.environ), check=False).returncode
        if status != 0:
            print(f"the job exited {status}", file=sys.stderr)
            return 1
        return report(kafka.bootstrap_servers, service, records)
    finally:
        service.stop()
        kafka.stop()
        if "--keep" not in (argv or sys.argv):
            shutil.rmtree(DEMO_DIR / "kafka", ignore_errors=True)


def report(bootstrap: str, service: SampleService, records: list[Record]) -> int:
    dlq = list(list_records(bootstrap, f"{TOPIC}-dlq"))
    in_dlq = Counter(f"{r.original_partition}/{r.original_offset}" for r in dlq)
    print(f"\nwhere every record went ({len(records)} records):")
    print(f"{'record':<12} {'service answers':<44} {'ends':<10} {'expected':<10} check")
    ok = True
    by_kind: Counter[tuple[str, str]] = Counter()
    for record_id in sorted(service.decisions, key=lambda r: int(r.split("-")[1])):
        decisions = service.decisions[record_id]
        end = ended(decisions)
        expected = EXPECTED_END[record_id.split("-")[0]]
        good = end == expected
        ok &= good
        by_kind[(record_id.split("-")[0], end)] += 1
        check = "OK" if good else "WRONG"
        print(f"{record_id:<12} {', '.join(decisions):<44} {end:<10} {expected:<10} {check}")
    missing = {r.value.decode() for r in records} - set(service.decisions)  # type: ignore[union-attr]
    ok &= not missing
    dlq_expected = sum(1 for d in service.decisions.values() if ended(d) == "dlq")
    ok &= len(dlq) == dlq_expected and all(n == 1 for n in in_dlq.values())
    print(f"\nthe DLQ ({TOPIC}-dlq), as python -m clients.dlq_list lists it:")
    for r in dlq:
        d = r.as_dict()
        print(
            f"  offset {d['offset']:>3}  origin {d['origin']:<22} retries {d['retry_count']}"
            f"  timeouts {d['timeout_count']}  key {d['key']}"
        )
    verdict = "OK" if len(dlq) == dlq_expected else "WRONG"
    print(f"  {len(dlq)} records, {dlq_expected} expected {verdict}")
    stats = read_append_only(DEMO_DIR / "wh" / "dispatch_stats")
    print("\ndispatch_stats, summed per tier:")
    names = ("records", "attempts", "committed", "skipped", "retried", "dlq", "timeouts")
    tiers: dict[str, Counter] = defaultdict(Counter)
    for row in stats:
        for n in names:
            tiers[row["tier"]][n] += row[n] or 0
    print(f"  {'tier':<9}" + "".join(f"{n:>10}" for n in names))
    for tier in sorted(tiers):
        print(f"  {tier:<9}" + "".join(f"{tiers[tier][n]:>10}" for n in names))
    verdict = "every record ended where the service sent it" if ok else "MISMATCH"
    print(f"\n{verdict}; missing: {sorted(missing) or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
