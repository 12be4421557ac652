"""Side by side: Debian's Burrow (1.2.1) and the availability job's consumer-lag evaluator watch
the same broker while the test drives consumer groups through scenarios whose truth it knows.

Both use a 5-commit window (Burrow storage `intervals`, our `lag_window_commits`), no
`min-distance` and no allowed lag. Every tick (3 s) the test first produces the tick's records,
then 1.6 s later commits explicit offsets for the groups, once Burrow (head offsets every
second) has fetched the new head, so the lag Burrow stores with a commit is exact. A full
window spans 12 s, so a group that stops committing is STOP 12 s after its last commit.

The consumers keep a pattern up for the whole run, so each scenario's status holds for a
phase of 30-40 s: the job evaluates only every few seconds (10-16 s on a loaded 2-core box),
Burrow is asked twice a second. In each phase, every evaluation by each of them must give the
status the table says. At the end nothing is produced or committed any more, and both must
report each group's true lag.

=================  ==================================  ==========  ==========  ==========
group              what the consumer does              truth       Burrow      ours
=================  ==================================  ==========  ==========  ==========
healthy            commits the head (lag 0)            OK          OK          OK
catching-up        5 records a tick, 2 produced        OK          OK          OK
lagging            1 record a tick, 6 produced         WARN        WARN        WARN
stalled            commits one offset, lag grows       ERR/STALL   ERR/STALL   ERR/STALL
stopped            5 commits, then none: first         OK, then    OK, then    OK, then
                   (lag falling), then                 ERR/STOP    ERR/STOP    ERR/STOP
rewound            5 commits, then every commit is     ERR/REWIND  ERR/REWIND  ERR/REWIND
                   below the one before (reset again
                   and again)
rewind-recovered   5 commits, then back 6 and past     OK          ERR/REWIND  OK
                   the old offset at the next commit
                   (re-reads after each rebalance)
reset-caught-up    caught up (lag 0), reset to offset  ERR/REWIND  OK          ERR/REWIND
                   0, then a commit every 3rd tick;
                   until its zero-lag commits leave
                   the window
idle-tail          caught up on a transactional topic  OK          ERR/STALL   OK
                   whose last offset is the commit
                   marker (lag 1), keeps committing
idle-tail-quiet    the same, 5 commits, then none:     OK          ERR/STALL,  OK
                   first, then                                     ERR/STOP
=================  ==================================  ==========  ==========  ==========

Where ours differs from Burrow 1.2.1, ours is right by design:

* rewind-recovered and reset-caught-up: Burrow 1.2.1 (2019) reports REWIND for any backward
  step in the window, and checks it only when no commit in the window had zero lag. Our rules
  are Burrow's current ones (`lag/rules.py`): a rewind that a later commit in the window makes
  good is forgiven (upstream PR #716), and REWIND is checked before the zero-lag rule, so a
  caught-up consumer reset to the start is not hidden by its earlier zero lags (issue #714).
* idle-tail and idle-tail-quiet: a consumer that read everything on a topic whose last offset
  is a transaction marker (never delivered as a record) stays one offset short of the head.
  Burrow reports STALL while it re-commits and STOP once it goes quiet; ours reports OK
  while nothing new is produced (`lag.rules.partition_status` rule 1b, not `lag_burrow_strict`).

One documented difference does not show against Burrow 1.2.1: it recomputes a stopped
group's current lag from the newest head offsets at every evaluation, as we do
(`lag/tracker.py`), so the stopped group's total lag matches in both.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from testing.polling import wait_for
from tests.jobs.availability.test_availability_integration import running, spec_for

pytestmark = pytest.mark.integration

TICK_S = 3.0
COMMIT_AFTER_S = 1.6  # > Burrow's offset-refresh (1 s): it has fetched the tick's head by then
TICKS = 18
WINDOW = 5  # commits per window, Burrow `intervals` and our `lag_window_commits`
SPAN_TICKS = WINDOW - 1  # a full window of one commit a tick spans this many ticks
BACKLOG = 100  # records in each plain topic before the first tick
TAIL_RECORDS = 20  # records in the idle-tail topics' one transaction (offsets 0-19)
TAIL_HEAD = TAIL_RECORDS + 1  # the commit marker takes offset 20
RESET_TICK = WINDOW  # reset-caught-up goes back to offset 0 here...
RESET_EVERY = 3  # ...and then commits every third tick only


@dataclass(frozen=True)
class Phase:
    """From tick `start`'s commit (plus `settle_s`) until tick `end`'s commit (None: the end of
    the run), every evaluation of the group by each evaluator must give these statuses."""

    start: int
    end: int | None
    truth: str
    burrow: str
    ours: str
    settle_s: float = 1.5  # Burrow's 1 s cache; our batch reads what was committed at its start
    ours_required: bool = True  # False: too short (10 s) to be sure the job evaluates in it


@dataclass(frozen=True)
class Scenario:
    name: str
    produce: int  # records produced every tick
    commits: tuple[int | None, ...]  # offset committed at each tick, None: no commit
    phases: tuple[Phase, ...]
    transactional: bool = False

    def head(self, tick: int) -> int:
        """The partition's head offset after tick `tick`'s records (-1: before the first)."""
        base = TAIL_HEAD if self.transactional else BACKLOG
        return base + self.produce * (tick + 1)

    @property
    def last_commit(self) -> tuple[int, int]:
        """(tick, offset) of the last commit."""
        tick = max(k for k, c in enumerate(self.commits) if c is not None)
        offset = self.commits[tick]
        assert offset is not None
        return tick, offset

    @property
    def final_lag(self) -> int:
        return self.head(TICKS - 1) - self.last_commit[1]


def _same(
    start: int,
    status: str,
    end: int | None = None,
    settle_s: float = 1.5,
    ours_required: bool = True,
) -> Phase:
    return Phase(start, end, status, status, status, settle_s, ours_required)


def _scenarios() -> list[Scenario]:
    ticks = range(TICKS)
    heads = [BACKLOG + 2 * (k + 1) for k in ticks]  # plain topics with 2 records a tick
    full = WINDOW  # from this tick's commit every window is full
    silent = WINDOW - 1 + SPAN_TICKS  # a quiet group's silence outlasts its window's span here
    # rewound: advances, then from tick WINDOW every commit is below the one before it.
    rewound = [
        40 + 3 * k if k < WINDOW else 40 + 3 * (WINDOW - 1) - 2 * (k - WINDOW + 1) for k in ticks
    ]
    # rewind-recovered: advances, then goes back 6 and passes the old offset at the next commit.
    recovered = [10 + 3 * k for k in range(WINDOW)]
    while len(recovered) < TICKS:
        back = (len(recovered) - WINDOW) % 2 == 0
        recovered.append(recovered[-1] - 6 if back else recovered[-1] + 12)
    # reset-caught-up: commits the head (lag 0), is reset to offset 0 and then commits every
    # third tick; its zero-lag commits stay in the window until the fourth commit after that.
    reset: list[int | None] = [h if k < RESET_TICK else None for k, h in enumerate(heads)]
    for i, k in enumerate(range(RESET_TICK, TICKS, RESET_EVERY)):
        reset[k] = 20 * i
    reset_over = RESET_TICK + (WINDOW - 1) * RESET_EVERY
    tail = (TAIL_RECORDS,) * TICKS
    quiet_tail = tuple(TAIL_RECORDS if k < WINDOW else None for k in ticks)
    return [
        Scenario("healthy", 2, tuple(heads), (_same(full, "OK/OK"),)),
        Scenario("catching-up", 2, tuple(10 + 5 * k for k in ticks), (_same(full, "OK/OK"),)),
        Scenario("lagging", 6, tuple(10 + k for k in ticks), (_same(full, "WARN/WARN"),)),
        Scenario("stalled", 2, (10,) * TICKS, (_same(full, "ERR/STALL"),)),
        Scenario(
            "stopped",
            2,
            tuple(10 + 3 * k if k < WINDOW else None for k in ticks),
            (
                _same(WINDOW - 1, "OK/OK", end=silent, ours_required=False),
                _same(silent, "ERR/STOP", settle_s=2.5),
            ),
        ),
        Scenario("rewound", 2, tuple(rewound), (_same(full, "ERR/REWIND"),)),
        Scenario(
            "rewind-recovered",
            2,
            tuple(recovered),
            # Burrow 1.2.1 predates PR #716: any backward step in the window is REWIND.
            (Phase(full + 1, None, "OK/OK", "ERR/REWIND", "OK/OK"),),
        ),
        Scenario(
            "reset-caught-up",
            2,
            tuple(reset),
            # Burrow 1.2.1 checks REWIND only if no stored lag is 0 (fixed upstream, #714).
            (Phase(RESET_TICK, reset_over, "ERR/REWIND", "OK/OK", "ERR/REWIND"),),
        ),
        # The transaction marker at offset 20 is never delivered: lag 1 for good. Burrow has no
        # idle-tail rule: STALL while the consumer re-commits, STOP once it is quiet.
        Scenario(
            "idle-tail",
            0,
            tail,
            (Phase(full, None, "OK/OK", "ERR/STALL", "OK/OK"),),
            transactional=True,
        ),
        Scenario(
            "idle-tail-quiet",
            0,
            quiet_tail,
            (
                Phase(WINDOW - 1, silent, "OK/OK", "ERR/STALL", "OK/OK", ours_required=False),
                Phase(silent, None, "OK/OK", "ERR/STOP", "OK/OK", settle_s=2.5),
            ),
            transactional=True,
        ),
    ]


SCENARIOS = _scenarios()


@dataclass(frozen=True)
class Seen:
    """One evaluation of one group, by Burrow or by the job."""

    at: float  # wall time, s
    status: str  # "GROUP/PARTITION"
    total_lag: int
    end_offset: int | None  # the window's newest commit
    end_ms: int | None  # its commit time
    stored_lag: int | None  # the lag stored with it


def burrow_seen(status: dict[str, Any], at: float) -> Seen:
    partitions = status.get("partitions") or []
    end = partitions[0]["end"] if partitions else None
    return Seen(
        at=at,
        status=f"{status['status']}/{partitions[0]['status'] if partitions else '-'}",
        total_lag=int(status.get("totallag") or 0),
        end_offset=end["offset"] if end else None,
        end_ms=end["timestamp"] if end else None,
        stored_lag=end["lag"] if end else None,
    )


@contextmanager
def polling_burrow(burrow, groups: dict[str, str]) -> Iterator[dict[str, list[Seen]]]:
    """Ask Burrow for every group's status (all partitions) twice a second while the block
    runs; yields the growing history per scenario name."""
    seen: dict[str, list[Seen]] = {name: [] for name in groups}
    stop = threading.Event()
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            while not stop.wait(0.5):
                for name, group in groups.items():
                    status = burrow.group_status(group, all_partitions=True)
                    if status["status"] != "NOTFOUND":
                        seen[name].append(burrow_seen(status, time.time()))
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(10)
    assert not errors, f"polling Burrow failed: {errors[0]!r}"


def our_seen(spark, status_path: str, groups: dict[str, str]) -> dict[str, list[Seen]]:
    """Every evaluation the job wrote to consumer_group_status, per scenario name."""
    if not DeltaTable.isDeltaTable(spark, status_path):
        return {name: [] for name in groups}
    by_group = {group: name for name, group in groups.items()}
    rows = (
        spark.read.format("delta")
        .load(status_path)
        .where(F.col("group").isin(list(by_group)))
        .select(
            "group",
            "evaluated_at",
            "status",
            "total_lag",
            F.get(F.col("partitions"), 0).alias("p"),  # NO_COMMITS rows have none
        )
        .orderBy("evaluated_at")
        .collect()
    )
    seen: dict[str, list[Seen]] = {name: [] for name in groups}
    for r in rows:
        p = r["p"]
        seen[by_group[r["group"]]].append(
            Seen(
                at=r["evaluated_at"].timestamp(),
                status=f"{r['status']}/{p['status'] if p else '-'}",
                total_lag=r["total_lag"],
                end_offset=p["end_offset"] if p else None,
                end_ms=int(p["end_commit_time"].timestamp() * 1000) if p else None,
                stored_lag=None,  # the table keeps the current lag, not the stored one
            )
        )
    return seen


def final(
    history: list[Seen], scenario: Scenario, commit_at: list[float], after: float
) -> Seen | None:
    """The first evaluation at or after `after` whose window ends with the scenario's last
    commit (offset and time), or None."""
    tick, offset = scenario.last_commit
    since_ms = commit_at[tick] * 1000 - 1000
    for s in history:
        if s.at >= after and s.end_offset == offset and (s.end_ms or 0) >= since_ms:
            return s
    return None


def test_burrow_and_our_evaluator_agree_except_where_ours_is_right(
    spark, kafka, burrow, tmp_path
) -> None:
    assert burrow.settings.intervals == WINDOW
    started = time.monotonic()
    run = uuid.uuid4().hex[:6]
    topics = {s.name: f"side-{s.name}-{run}" for s in SCENARIOS}
    groups = {s.name: f"side-{s.name}-{run}" for s in SCENARIOS}
    bootstrap = kafka.bootstrap_servers
    now_ms = int(time.time() * 1000)
    for s in SCENARIOS:
        kafka.create_topic(topics[s.name], 1, 1)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for s in SCENARIOS:
        if s.transactional:
            _produce_one_transaction(bootstrap, topics[s.name], TAIL_RECORDS, now_ms)
        else:
            for i in range(BACKLOG):
                plain.produce(topics[s.name], b"x", partition=0, timestamp=now_ms + i)
    assert plain.flush(30) == 0

    # Burrow drops commits for a topic it has no head offset for yet.
    def burrow_knows_heads() -> bool:
        return all(burrow.topic_offsets(topics[s.name]) == [s.head(-1)] for s in SCENARIOS)

    wait_for(burrow_knows_heads, 30, "Burrow to fetch the new topics' head offsets")

    spec = spec_for(
        tmp_path,
        bootstrap,
        f"side-{run}",
        skipTopicAvailability=True,
        skipProbes=True,
        lagWindowCommits=WINDOW,
    )
    committers = {
        s.name: Consumer({"bootstrap.servers": bootstrap, "group.id": groups[s.name]})
        for s in SCENARIOS
    }
    commit_at: list[float] = []  # wall time at which each tick's commits began
    try:
        with running(spec, tmp_path / "stop"), polling_burrow(burrow, groups) as burrow_history:
            wait_for(
                lambda: (
                    DeltaTable.isDeltaTable(spark, spec.output.table("consumer_group_status"))
                    and spark.read.format("delta")
                    .load(spec.output.table("consumer_group_status"))
                    .limit(1)
                    .count()
                ),
                120,
                "the job's first evaluation",
            )
            print(f"\njob evaluating {time.monotonic() - started:.0f} s into the test")
            t0 = time.monotonic()
            for tick in range(TICKS):
                _sleep_until(t0 + tick * TICK_S)
                stamp = int(time.time() * 1000)
                for s in SCENARIOS:
                    for i in range(s.produce):
                        plain.produce(topics[s.name], b"x", partition=0, timestamp=stamp + i)
                assert plain.flush(10) == 0
                _sleep_until(t0 + tick * TICK_S + COMMIT_AFTER_S)
                commit_at.append(time.time())
                for s in SCENARIOS:
                    offset = s.commits[tick]
                    if offset is not None:
                        # A synchronous commit that failed committed nothing: retried while
                        # the broker gives a transient error (a coordinator still loading).
                        at = [TopicPartition(topics[s.name], 0, offset)]
                        wait_for(
                            lambda c=committers[s.name], at=at: c.commit(
                                offsets=at, asynchronous=False
                            ),
                            10,
                            f"{s.name}'s commit at {offset}",
                        )
            t_end = time.time()

            # Nothing is produced or committed any more: both must now report the final lag.
            def both_final() -> dict[str, tuple[Seen, Seen]] | None:
                ours = our_seen(spark, spec.output.table("consumer_group_status"), groups)
                snapshot = {}
                for s in SCENARIOS:
                    # Burrow: after its next head refresh and its 1 s cache.
                    b = final(burrow_history[s.name], s, commit_at, t_end + 2.5)
                    o = final(ours[s.name], s, commit_at, t_end)
                    if b is None or o is None:
                        return None
                    snapshot[s.name] = (b, o)
                return snapshot

            found = wait_for(both_final, 90, "both evaluators to see the last commits")
            assert found is not None
            last = found
            burrow_all = {name: list(h) for name, h in burrow_history.items()}
            print(f"both final {time.monotonic() - started:.0f} s into the test")
        print(f"job stopped {time.monotonic() - started:.0f} s into the test")
        ours_all = our_seen(spark, spec.output.table("consumer_group_status"), groups)
    finally:
        for c in committers.values():
            c.close()

    # The test's timing makes the lag stored with each commit exact for Burrow (it has the
    # tick's head before the commit arrives). If it is not, the comparison is off.
    burrow_stored = {
        name: {
            (h.end_ms, h.end_offset, h.stored_lag)
            for h in history
            if h.end_ms is not None and h.end_offset is not None
        }
        for name, history in burrow_all.items()
    }
    ours_stored = our_stored_lags(spark, spec.output.table("consumer_offset_commits"), groups)
    for s in SCENARIOS:
        bad = stored_lag_errors(s, burrow_stored[s.name], commit_at)
        assert not bad, f"Burrow stored wrong lags for {s.name} (tick, offset, lag, truth): {bad}"

    # Every phase: each evaluator gives its expected status in every evaluation, and the
    # statuses differ only where the scenario says ours is right (the module docstring).
    lines: list[str] = []
    failures: list[str] = []
    for s in SCENARIOS:
        ours_wrong_lags = stored_lag_errors(s, ours_stored[s.name], commit_at)
        for ph in s.phases:
            assert ph.ours == ph.truth, f"{s.name}: ours is expected to tell the truth"
            begin = commit_at[ph.start] + ph.settle_s
            end = commit_at[ph.end] - 0.5 if ph.end is not None else t_end
            seen_b = Counter(h.status for h in burrow_all[s.name] if begin <= h.at <= end)
            seen_o = Counter(h.status for h in ours_all[s.name] if begin <= h.at <= end)
            line = (
                f"  {s.name:17} ticks {ph.start:2}-{ph.end if ph.end is not None else TICKS:2} "
                f"truth {ph.truth:10} Burrow {dict(seen_b)} ours {dict(seen_o)}"
            )
            lines.append(line)
            if set(seen_b) != {ph.burrow} or (ph.ours_required and not seen_o):
                failures.append(line + f" (want Burrow {ph.burrow}, ours {ph.ours})")
            elif set(seen_o) - {ph.ours}:
                wrong = f"{line} (want ours {ph.ours}; ours stored lags (tick, offset, lag, truth) "
                wrong += f"{ours_wrong_lags})"
                failures.append(wrong)
    for s in SCENARIOS:
        b, o = last[s.name]
        lines.append(
            f"  {s.name:17} final lag: truth {s.final_lag:3} Burrow {b.total_lag:3} "
            f"ours {o.total_lag:3} (ours {o.at - t_end:4.1f} s after the last commit)"
        )
        # Both compute the current lag from the newest head offsets.
        if not b.total_lag == o.total_lag == s.final_lag:
            failures.append(lines[-1])
    report = "\n".join(lines)
    print(f"\nBurrow 1.2.1 and the availability job, evaluations per status:\n{report}")
    assert not failures, "\n".join(failures)

    # Burrow 1.2.1 recomputes a stopped consumer's lag from new head offsets too: the lag it
    # reports grew past the lag it stored with the consumer's last commit.
    b_stopped = last["stopped"][0]
    stopped = next(s for s in SCENARIOS if s.name == "stopped")
    assert b_stopped.stored_lag is not None
    assert b_stopped.total_lag == stopped.final_lag > b_stopped.stored_lag


def our_stored_lags(
    spark, commits_path: str, groups: dict[str, str]
) -> dict[str, set[tuple[int, int, int | None]]]:
    """(commit time ms, offset, stored lag) of every commit the job recorded, per scenario."""
    by_group = {group: name for name, group in groups.items()}
    stored: dict[str, set[tuple[int, int, int | None]]] = {name: set() for name in groups}
    if not DeltaTable.isDeltaTable(spark, commits_path):
        return stored
    rows = (
        spark.read.format("delta")
        .load(commits_path)
        .where(F.col("group").isin(list(by_group)))
        .collect()
    )
    for r in rows:
        ms = int(r["commit_time"].timestamp() * 1000)
        stored[by_group[r["group"]]].add((ms, r["offset"], r["lag"]))
    return stored


def stored_lag_errors(
    scenario: Scenario, stored: set[tuple[int, int, int | None]], commit_at: list[float]
) -> list[tuple[int, int, int | None, int]]:
    """The commits whose stored lag is not the truth: (tick, offset, stored lag, true lag)."""
    wrong = []
    for ms, offset, lag in sorted(stored):
        tick = next((k for k, t in enumerate(commit_at) if 0 <= ms / 1000 - t < 1.0), None)
        if tick is None or scenario.commits[tick] != offset:
            continue  # not one of this run's commits
        truth = max(scenario.head(tick) - offset, 0)
        if lag != truth:
            wrong.append((tick, offset, lag, truth))
    return wrong


def _produce_one_transaction(bootstrap: str, topic: str, count: int, ts_ms: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"side-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, b"x", partition=0, timestamp=ts_ms + i)
    producer.commit_transaction(30)


def _sleep_until(monotonic_at: float) -> None:
    delay = monotonic_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
