"""Fleet scale, part 2: many JobGroups on a few worker applications, against one application
per group.

On a private 1-broker Kafka under var/bench/, with a control plane (`python -m controlplane
serve --workers W`, SQLite store, local launcher, heartbeats every second):

1. --audits single-topic KAFKA_AUDIT groups (EXACT_UNIQ and APPROX_UNIQ, 60 s windows; with
   --packed APPROX_UNIQ only and one consumer group, so the workers run them in audit packs,
   a pack's first batch and commits counting for each of its groups) and --replications
   KAFKA_REPLICATION groups (flow control --copy-rate; with --packed only the --updates ones,
   so the others run in replication packs), each on its own topic of --partitions partitions,
   fed --rate records/s per topic by one paced producer (bench/fleet_bench.py's: known counts per
   window), and --dispatchers RPC dispatcher groups to the Go sink (bench/fleet_dispatch.py).
   The worker applications are up (registered) before the first AddJobGroup.
2. Every group is added through AddJobGroup, one after another; for each, the time from its
   AddJobGroup to its first batch committed after it (Spark's commit in its checkpoint, or in
   its pack's, bench/fleet_pool_phases.py `first_commits`): p50, p99, max;
   for the audits also to their first rows in audit_counts (bench/progress_times.py); and
   the CPU the burst used until half the groups, and until all, had committed: the machine's
   busy cores, the workers' CPU seconds, every kind of process's (`BurstCpu`).
3. Resident memory (every worker's process tree, /proc) and CPU, sampled for --minutes.
4. --late-adds groups of each kind (audit, replication, dispatcher; their topics fed from the
   start) are added to the running fleet one at a time, each once the one before has
   committed: the time from each AddJobGroup to its first committed batch, as an operator
   adding a group sees it, against the burst of step 2 (bench/fleet_pool_phases.py).
5. --updates replication groups (flow control --copy-rate) get half that rate
   (UpdateJobGroup): the time until their worker runs the new definition, whether the query
   took it in place (the same Spark run), and the batches until the first one at the new cap.
   With --packed, --unpacks packed replications get flow control (--copy-rate), which does
   not pack: the time until each one's first batch alone (its generation alone) committed.
6. --cancels audit groups are CANCELED: the time until their worker reported the query stopped
   (GetJobGroup shows the job CANCELED, as the worker's heartbeat said).
7. One worker application is SIGKILLed: for each of its groups, the time from the kill to
   the next batch committed (on the worker the pool relaunched, or another one).
8. The producer stops; once every record is counted, copied and dispatched (or a deadline):
   every audit window against the truth, every copy against its source (each record once, in
   order), every dispatcher's records at the sink (fleet_dispatch.check).
9. Side by side, today's way: --baseline-apps audits as one application each (spark-submit.sh,
   same settings), sampled for --baseline-minutes; ratio per group of memory and CPU.

Figures go to stdout, var/bench/fleet-pool-result.json and
docs/benchmarks/fleet-pool-<UTC>-<commit>.json. Nothing here asserts a duration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (JobGroup.extension in JSON)
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from bench import fleet_dispatch
from bench._common import (
    BENCH_DIR,
    bench_parser,
    parse_args,
    say,
    spark_submit_env,
    wait_for,
    warn_if_jobs_zip_stale,
    work_dir,
    write_latest,
    write_result,
)
from bench.fleet_bench import (
    BOTH_TYPES,
    FleetProducer,
    audit_group,
    compare,
    create_topics,
    read_counts,
    run_baseline,
)
from bench.fleet_pool_phases import (
    BurstCpu,
    add_one_at_a_time,
    burst_cpu,
    cancel_some,
    first_commits,
    seconds,
    seconds_by_kind,
    unpack_some,
    update_some,
)
from bench.process_usage import sample
from bench.progress_times import FirstRows, committed_after
from controlplane.state.sqlite import SqliteStore
from core.channel import open_channel
from core.paths import ROOT
from core.processes import free_ports, signal_group, terminate
from devservices.grpc_sink import GrpcSink, install_sink, start_sink
from devservices.kafka import start_cluster
from testing.conf import write_conf_dir
from testing.jobgroups import replication_group
from testing.topic_data import read_partitions


def copy_of(topic: str, trigger_seconds: int, rate: float = 0) -> JobGroup:
    """The replication group of `topic`, into `<topic>.copy`."""
    return replication_group(
        f"r-{topic}", topic, f"{topic}.copy", trigger_seconds=trigger_seconds, rate=rate
    )


def start_control_plane(workdir: Path, conf: Path, args) -> tuple[subprocess.Popen, str]:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    argv = [
        sys.executable, "-m", "controlplane", "serve", "--address", address,
        "--store", str(workdir / "cp.sqlite"), "--conf-dir", str(conf),
        "--apps-dir", str(workdir / "apps"), "--workers", str(args.workers),
        "--worker-capacity", str(args.capacity), "--heartbeat-seconds", "1",
        "--reconcile-seconds", "1", "--lease-seconds", str(args.lease_seconds),
    ]  # fmt: skip
    env = spark_submit_env(conf, master=args.worker_master, driver_memory=args.driver_memory)
    log = (BENCH_DIR / "fleet-pool-controlplane.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    return proc, address


def worker_pids(store: SqliteStore) -> dict[int, int]:
    """worker id -> pid of every pool worker application."""
    return {
        int(r.worker_id or 0): int(r.detail("pid"))
        for k, r in store.launches().items()
        if k.startswith("~worker/")
    }


def groups_on(store: SqliteStore, worker_id: int) -> list[str]:
    return sorted(
        k for k, r in store.launches().items() if not k.startswith("~") and r.worker_id == worker_id
    )


def audit_types(args) -> tuple[str, ...]:
    """What the audits count: with --packed, approximate only (what packs on a worker)."""
    return ("AUDIT_TYPE_APPROX_UNIQ",) if args.packed else BOTH_TYPES


def bench(args) -> dict[str, Any]:
    with (
        work_dir("fleet-pool", keep=args.keep) as workdir,
        start_sink(workdir / "sink", binary=install_sink()) as sink,
        start_cluster(workdir / "kafka", heap="1g") as cluster,
    ):
        return run(args, workdir, cluster.bootstrap_servers, sink)


def run(args, workdir: Path, bootstrap: str, sink: GrpcSink) -> dict[str, Any]:
    audits = [f"pool.a{i:03d}" for i in range(args.audits)]
    copies = [f"pool.r{i:03d}" for i in range(args.replications)]
    dispatched = [f"pool.d{i:03d}" for i in range(args.dispatchers)]
    # Fed from the start like the others; their groups are added once the fleet runs.
    late_audits, late_copies, late_dispatched = (
        [f"pool.{kind}.late{i:02d}" for i in range(args.late_adds)] for kind in "ard"
    )
    fed = audits + copies + dispatched + late_audits + late_copies + late_dispatched
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topics(admin, fed + [f"{t}.copy" for t in copies + late_copies], args.partitions)
    producer = FleetProducer(bootstrap, fed, args.partitions, args.rate)
    producer.start()
    checkpoints = workdir / "ck"
    conf = write_conf_dir(workdir / "conf", bootstrap, workdir / "wh", checkpoints)
    plane, address = start_control_plane(workdir, conf, args)
    store = SqliteStore(workdir / "cp.sqlite")
    figures: dict[str, Any] = {"groups": len(audits) + len(copies) + len(dispatched)}
    try:
        with open_channel(address) as channel:
            stub = admin_grpc.MasterAdminServiceStub(channel)
            up = wait_for("the worker applications", lambda: _registered(store, args), 600, 1)
            say(f"{args.workers} worker applications registered after {up} s")
            (first_rows := FirstRows(workdir / "wh" / "audit_counts", "job_group_id")).start()
            groups = [
                g
                for kind in pool_groups(audits, copies, dispatched, sink, args, args.updates)
                for g in kind
            ]
            pids = list(worker_pids(store).values())
            added = add_groups(stub, groups, checkpoints, args, figures, BurstCpu(pids))
            figures["workers"] = sample(pids, args.minutes * 60)
            first_rows.stopping.set()
            figures["add_to_counts_s"] = seconds(first_rows.since(added))  # audits only
            say(f"workers: {figures['workers']}")
            late = pool_groups(late_audits, late_copies, late_dispatched, sink, args, 0)
            figures["late"] = add_one_at_a_time(stub, interleaved(late), checkpoints, 300)
            updated = [copy_of(t, args.replication_trigger_seconds, rate=args.copy_rate / 2)
                       for t in copies[: args.updates]]  # fmt: skip
            figures["update"] = update_some(stub, updated, checkpoints, store)
            if args.packed and args.unpacks:
                packed = copies[args.updates : args.updates + args.unpacks]
                capped = [
                    copy_of(t, args.replication_trigger_seconds, args.copy_rate) for t in packed
                ]
                figures["unpack"] = unpack_some(stub, capped, checkpoints)
            figures["cancel"] = cancel_some(stub, [f"a-{t}" for t in audits[-args.cancels :]])
            figures["sigkill"] = kill_one(store, checkpoints, args)
        producer.stopping.set()
        producer.join()
        live = audits[: len(audits) - args.cancels] + late_audits
        copied = copies + late_copies
        figures["truth"] = check_truth(workdir, bootstrap, producer, live, copied, args)
        sent = fleet_dispatch.sent_to(dispatched + late_dispatched, producer.truth.sent)
        figures["truth"].update(fleet_dispatch.check(workdir / "wh", sink, sent))
    finally:
        producer.stopping.set()
        terminate(plane)
        for pid in worker_pids(store).values():
            signal_group(pid, signal.SIGKILL)
        store.close()
    if args.baseline_apps:
        figures["baseline"] = baseline(args, workdir, conf, bootstrap, audits, figures)
    return figures


def _registered(store: SqliteStore, args) -> bool:
    ids = set(worker_pids(store))
    return len(ids) == args.workers and ids <= {w.node.id for w in store.workers()}


def pool_groups(
    audits, copies, dispatched, sink: GrpcSink, args, capped_copies: int
) -> list[list[JobGroup]]:
    """The groups of the topics of each kind: audits, replications, dispatchers; the first
    `capped_copies` replications with flow control (all without --packed)."""
    audit_groups = [
        json_format.ParseDict(
            audit_group(
                f"a-{t}",
                topic=t,
                trigger=args.trigger_seconds,
                audit_types=audit_types(args),
                consumer_group="pool-audits" if args.packed else "",
            ),
            JobGroup(),
        )
        for t in audits
    ]
    copy_groups = [
        copy_of(t, args.replication_trigger_seconds, rate)
        for i, t in enumerate(copies)
        for rate in [args.copy_rate if not args.packed or i < capped_copies else 0]
    ]
    dispatchers = fleet_dispatch.groups(dispatched, sink, args.dispatch_trigger_seconds)
    return [audit_groups, copy_groups, dispatchers]


def interleaved(kinds: list[list[JobGroup]]) -> list[JobGroup]:
    """One of each kind in turn: a, r, d, a, r, d, ..."""
    return [group for row in zip(*kinds, strict=True) for group in row]


def add_groups(
    stub, groups: list[JobGroup], checkpoints: Path, args, figures, cpu: BurstCpu
) -> dict[str, float]:
    """Add every group; its first committed batch, and the CPU the burst used until then
    (`cpu`, read at each poll), into `figures`; when each was added."""
    added: dict[str, float] = {}
    for group in groups:
        stub.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group))
        added[group.job_group_id] = time.time()
        cpu.take()
    say(f"{len(groups)} groups added; waiting for each one's first committed batch")
    first: dict[str, float] = {}

    def all_committed() -> bool:
        cpu.take(by_kind=True)
        return first_commits(checkpoints, added, first)

    wait_for("every group's first batch", all_committed, args.first_batch_deadline, 1)
    figures["add_to_first_commit_s"] = seconds(list(first.values()))
    figures["burst_cpu"] = burst_cpu(cpu, added, first)
    say(f"the burst's CPU: {figures['burst_cpu']}")
    figures["add_to_first_commit_s_by_kind"] = seconds_by_kind(first)
    figures["groups_never_committed"] = sorted(set(added) - set(first))[:10]
    return added


def kill_one(store: SqliteStore, checkpoints: Path, args) -> dict:
    worker_id, pid = next(iter(sorted(worker_pids(store).items())))
    victims = groups_on(store, worker_id)
    at = time.time()
    signal_group(pid, signal.SIGKILL)
    say(f"SIGKILLed worker {worker_id} (pid {pid}) with {len(victims)} groups")
    resumed: dict[str, float] = {}

    def all_resumed() -> bool:
        for group_id in victims:
            if group_id not in resumed and committed_after(checkpoints, group_id, at):
                resumed[group_id] = time.time() - at
        return len(resumed) == len(victims)

    wait_for("the killed worker's groups to commit again", all_resumed, 600, 1)
    return {
        "groups": len(victims),
        "to_next_commit_s": seconds(list(resumed.values())),
        "to_next_commit_s_by_kind": seconds_by_kind(resumed),
        "lease_plus_10_s": args.lease_seconds + 10,
    }


def check_truth(workdir, bootstrap, producer, audits, copies, args) -> dict[str, Any]:
    """Every window of the audits of `audits` (their topics; the canceled ones left out),
    every copy of `copies` against the truth."""
    counts = str(workdir / "wh" / "audit_counts")
    live = [f"a-{t}" for t in audits]
    total = {f"a-{t}": 0 for t in audits}
    for (topic, _, _), n in producer.truth.sent.items():
        if f"a-{topic}" in total:
            total[f"a-{topic}"] += n

    def counted() -> bool:
        rows = read_counts(counts)
        got: dict[str, int] = {}
        for r in rows:
            if r["audit_type"] == audit_types(args)[0]:
                got[r["job_group_id"]] = got.get(r["job_group_id"], 0) + r["message_count"]
        return all(got.get(g, 0) >= total[g] for g in live)

    wait_for("every record counted", counted, 900, 5)
    rows = read_counts(counts)
    wrong = 0
    for group_id in live:
        topic = group_id[2:]
        truth = type(producer.truth)()
        truth.sent.update({k: v for k, v in producer.truth.sent.items() if k[0] == topic})
        truth.repeats.update({k: v for k, v in producer.truth.repeats.items() if k[0] == topic})
        result = compare(rows, truth, group_id, audit_types(args))
        wrong += result["windows_wrong"] + result["rows_not_sent"]
    copied_wrong = 0
    for topic in copies:
        want = read_partitions(bootstrap, topic, args.partitions, timeout_s=30)

        def same(topic=topic, want=want) -> bool:
            got = read_partitions(bootstrap, f"{topic}.copy", args.partitions, timeout_s=30)
            return all(
                [(r.key, r.value) for r in got[p]] == [(r.key, r.value) for r in want[p]]
                for p in range(args.partitions)
            )

        copied_wrong += wait_for(f"{topic} copied", same, 300, 5) is None
    return {
        "audits_checked": len(live),
        "audit_windows_wrong": wrong,
        "replications_checked": len(copies),
        "replications_not_exact": copied_wrong,
        "records": producer.truth.total,
    }


def baseline(args, workdir, conf, bootstrap, audits, figures) -> dict[str, Any]:
    """One application per group, as `spark-submit.sh JOBGROUP.json` runs it (fleet_bench's
    baseline, on audits of the pool's topics, fed again at the same rate)."""
    feeder = FleetProducer(bootstrap, audits[: args.baseline_apps], args.partitions, args.rate)
    feeder.start()
    try:
        usage = run_baseline(args, workdir, conf, audits, audit_types(args))
    finally:
        feeder.stopping.set()
        feeder.join()
    groups = figures["groups"]
    pooled = figures["workers"]
    return {
        "apps": args.baseline_apps,
        "usage": usage,
        "ratio_memory_per_group": usage["rss_mean_gib"]
        / args.baseline_apps
        / (pooled["rss_mean_gib"] / groups),
        "ratio_cores_per_group": usage["cores"] / args.baseline_apps / (pooled["cores"] / groups),
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.fleet_pool", __doc__)
    parser.add_argument("--audits", type=int, default=150)
    parser.add_argument("--replications", type=int, default=40)
    parser.add_argument("--dispatchers", type=int, default=10, help="to the Go gRPC sink")
    parser.add_argument("--dispatch-trigger-seconds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--capacity", type=int, default=50, help="groups per worker at most")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=int, default=2, help="records/s per topic")
    parser.add_argument("--trigger-seconds", type=int, default=60, help="of the audits")
    parser.add_argument("--replication-trigger-seconds", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=5, help="memory and CPU sampling")
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument(
        "--unpacks",
        type=int,
        default=2,
        help="with --packed: packed replications given flow control, which takes them out of "
        "their pack",
    )
    parser.add_argument(
        "--copy-rate",
        type=float,
        default=1000,
        help="each replication's flow control, msgs/s (far above --rate: it never binds); "
        "the updates halve it",
    )
    parser.add_argument("--cancels", type=int, default=10)
    parser.add_argument(
        "--late-adds",
        type=int,
        default=4,
        help="groups of each kind added one at a time once the fleet runs (topics fed from "
        "the start)",
    )
    parser.add_argument("--lease-seconds", type=float, default=20)
    parser.add_argument("--first-batch-deadline", type=float, default=1200)
    parser.add_argument("--baseline-apps", type=int, default=3)
    parser.add_argument("--baseline-minutes", type=float, default=3)
    parser.add_argument("--driver-memory", default="2g", help="of every application")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    parser.add_argument(
        "--worker-master",
        default=None,
        help="Spark master of the worker applications (default: spark-submit.sh's for a "
        "worker, local[N] with N twice the cores and at least 4; the baseline's is local[2])",
    )
    parser.add_argument(
        "--packed",
        action="store_true",
        help="audits that pack on the workers (APPROX_UNIQ only, one consumer group): one "
        "query per pack, not per group (docs/audit.md, Audit packs)",
    )
    args = parse_args(
        parser,
        argv,
        {
            "audits": 8,
            "replications": 4,
            "dispatchers": 2,
            "workers": 2,
            "minutes": 1,
            "updates": 2,
            "cancels": 2,
            "late_adds": 1,
            "baseline_apps": 1,
            "baseline_minutes": 1,
        },
    )
    warn_if_jobs_zip_stale()
    os.environ.pop("UATU_FAULT", None)
    figures = bench(args)
    say(json.dumps(figures, indent=2, default=str))
    write_latest(BENCH_DIR / "fleet-pool-result.json", figures)
    say(f"result: {write_result('fleet-pool', figures, args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
