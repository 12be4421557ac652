"""The fault hook itself (`core/faults.py` and its Java twin `FaultPoints`): what UATU_FAULT
accepts (one table of values run through both parsers), when a point fires, that a crash takes
the whole process group with it, that every declared point is placed and every placed one
declared, and that a job refuses a point its JobType never reaches."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core import faults
from core.errors import EXIT_BAD_INPUT, ConfigError
from core.faults import (
    CRASH,
    FAIL_FIRST_ATTEMPT,
    PAUSE,
    POINTS,
    Fault,
    FaultInjected,
    fault_point,
    for_job,
    parse,
)
from core.paths import PROJECT_JAR, ROOT
from core.processes import pid_alive
from devservices.kafka import jvm_command
from jobs import main as job_main
from jobs.registry import JOB_TYPES
from testing.conf import write_conf_dir

AUDIT = "JOB_TYPE_KAFKA_AUDIT"
REPLICATION = "JOB_TYPE_KAFKA_REPLICATION"
DISPATCH = "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER"
CONTROL_PLANE = "controlplane"  # core.faults.CONTROL_PLANE: the control plane's own process
WORKER = "worker"  # core.faults.WORKER: a worker application's own loop
AFTER_DISPATCH = "dispatch.after_dispatch"


@pytest.fixture(autouse=True)
def fresh_counts():
    faults.reset()
    yield
    faults.reset()


# UATU_FAULT values -> their faults (None: refused), for both parsers. Only declared points,
# scoped only where POINTS gives a scope: the JVM knows the grammar, not the list of points.
GRAMMAR = [
    ("", ()),
    (" , \t,", ()),
    ("audit.keys_committed", (Fault("audit.keys_committed", 1, CRASH),)),
    (
        " replication.record_acked@40:fail-first-attempt , audit.keys_committed@2",
        (
            Fault("replication.record_acked", 40, FAIL_FIRST_ATTEMPT),
            Fault("audit.keys_committed", 2, CRASH),
        ),
    ),
    ("\treplication.tail_read@3:pause=2500\t", (Fault("replication.tail_read", 3, PAUSE, 2500),)),
    ("replication.tail_read:pause=0", (Fault("replication.tail_read", 1, PAUSE, 0),)),
    ("audit.keys_committed@01:crash", (Fault("audit.keys_committed", 1, CRASH),)),
    ("audit.keys_committed@9223372036854775807", (Fault("audit.keys_committed", 2**63 - 1),)),
    (f"{AFTER_DISPATCH}/orders-r1.x_2", (Fault(AFTER_DISPATCH, scope="orders-r1.x_2"),)),
    (
        f"dispatch.before_checkpoint/orders@3:fail-first-attempt,{AFTER_DISPATCH}@2",
        (
            Fault("dispatch.before_checkpoint", 3, FAIL_FIRST_ATTEMPT, scope="orders"),
            Fault(AFTER_DISPATCH, 2),
        ),
    ),
    ("audit.keys_committed@9223372036854775808", None),
    ("audit.keys_committed@0", None),
    ("audit.keys_committed@x", None),
    ("audit.keys_committed@", None),
    ("audit.keys_committed@-1", None),
    ("audit.keys_committed@+1", None),
    ("audit.keys_committed@1.0", None),
    ("audit.keys_committed@\u00b2", None),  # a digit to str.isdigit, not to the grammar
    ("audit.keys_committed@ 1", None),
    ("audit.keys_committed@1@2", None),
    ("audit.keys_committed:", None),
    (":crash", None),
    ("@2", None),
    ("audit.keys_committed:explode", None),
    ("audit.keys_committed:crash:crash", None),
    ("audit.keys_committed:crash=10", None),
    ("audit.keys_committed:fail-first-attempt=1", None),
    ("replication.tail_read:pause", None),
    ("replication.tail_read:pause=", None),
    ("replication.tail_read:pause=1.5s", None),
    ("replication.tail_read:pause=-1", None),
    ("replication.tail_read:pause=9223372036854775808", None),
    ("audit.keys committed", None),
    ("\u00a0audit.keys_committed", None),  # only spaces and tabs are stripped
    (f"{AFTER_DISPATCH}/", None),
    (f"{AFTER_DISPATCH}/a b", None),
    (f"{AFTER_DISPATCH}/a/b", None),
    (f"{AFTER_DISPATCH}/or@ders", None),
    ("audit.keys_committed,audit.keys_committed@0", None),
]


def shown(expected: tuple[Fault, ...] | None) -> str:
    """A table row as FaultPoints' `parse` entry prints it."""
    if expected is None:
        return "error"
    return ",".join(
        f"{f.target}@{f.hit}:{f'pause={f.pause_ms}' if f.action == PAUSE else f.action}"
        for f in expected
    )


@pytest.mark.parametrize(("value", "expected"), GRAMMAR)
def test_the_grammar_in_python(value: str, expected: tuple[Fault, ...] | None) -> None:
    if expected is not None:
        assert parse(value) == expected
        return
    with pytest.raises(ConfigError) as caught:
        parse(value)
    assert caught.value.exit_status == EXIT_BAD_INPUT
    assert faults.ENV in str(caught.value)


def run_fault_points(tmp_path: Path, *args: str, env: dict[str, str], stdin: str = "") -> str:
    """FaultPoints' test entry (`main`) on the project's jar -> its stdout."""
    jars = tmp_path / "jars"
    jars.mkdir(exist_ok=True)
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations
    slf4j = sorted((Path(spec.submodule_search_locations[0]) / "jars").glob("slf4j-api-*.jar"))
    for jar in (PROJECT_JAR, *slf4j):
        (jars / jar.name).symlink_to(jar)
    log4j = tmp_path / "log4j.properties"
    log4j.write_text("log4j.rootLogger=ERROR\n")
    command = jvm_command(jars, log4j, "dev.uatu.faults.FaultPoints", *args)
    clean = {k: v for k, v in os.environ.items() if k != faults.ENV}
    done = subprocess.run(
        command,
        input=stdin,
        env={**clean, **env},
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.spark  # needs the project's jar (`make build`), not a session
def test_the_grammar_in_the_jvm(tmp_path: Path) -> None:
    values = [value for value, _ in GRAMMAR]
    out = run_fault_points(tmp_path, "parse", env={}, stdin="\n".join(values) + "\n")
    assert out.splitlines() == [shown(expected) for _, expected in GRAMMAR]


# One UATU_FAULT, one sequence of hits: which hits fire, on both sides. The scoped fault counts
# the hits of its topic only; the unscoped one every hit of the point.
HITS_VALUE = f"{AFTER_DISPATCH}/orders@2:fail-first-attempt,{AFTER_DISPATCH}@3:fail-first-attempt"
HITS = [
    (f"{AFTER_DISPATCH}/orders-r1", "passed"),  # point: 1
    (f"{AFTER_DISPATCH}/orders", "passed"),  # orders: 1, point: 2
    (f"{AFTER_DISPATCH}/orders-r1", "fired"),  # point: 3
    (f"{AFTER_DISPATCH}/orders", "fired"),  # orders: 2, point: 4
    (f"{AFTER_DISPATCH}/orders", "passed"),  # orders: 3, point: 5
    ("audit.keys_committed", "passed"),  # not named: not counted
]


def test_hits_in_python(monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV, HITS_VALUE)
    seen = []
    for target, _ in HITS:
        name, _, scope = target.partition("/")
        try:
            fault_point(name, scope)
            seen.append("passed")
        except FaultInjected:
            seen.append("fired")
    assert seen == [outcome for _, outcome in HITS]
    assert faults.hits() == {f"{AFTER_DISPATCH}/orders": 3, AFTER_DISPATCH: 5}


@pytest.mark.spark  # needs the project's jar (`make build`), not a session
def test_hits_in_the_jvm(tmp_path: Path) -> None:
    targets = [target for target, _ in HITS]
    out = run_fault_points(tmp_path, "hits", *targets, env={faults.ENV: HITS_VALUE})
    assert out.splitlines() == [outcome for _, outcome in HITS]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("audit.keys_comitted", "unknown point"),
        ("audit.keys_committed/orders", "audit.keys_committed takes no /<scope>"),
        ("audit.keys_committed:explode", "the action must be one of"),
        ("audit.keys_committed@0", "@n must be a whole number from 1 to 2^63-1"),
        ("replication.tail_read:pause=1.5s", "pause=<ms> needs a whole number of milliseconds"),
        (f"{AFTER_DISPATCH}/a b", "/<scope> must be of [A-Za-z0-9._-]+"),
    ],
)
def test_a_malformed_value_is_bad_input_naming_the_entry(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(value)
    assert fragment in str(caught.value)
    assert caught.value.exit_status == EXIT_BAD_INPUT
    assert f"{faults.ENV}: {value!r}" in str(caught.value)


@pytest.fixture
def no_crash(monkeypatch) -> list[str]:
    """A crash recorded instead of done (it would kill the test runner), and no pause slept."""
    crashes: list[str] = []
    monkeypatch.setattr(faults, "crash", crashes.append)
    monkeypatch.setattr(faults.time, "sleep", lambda s: crashes.append(f"slept {s}"))
    return crashes


def hit_every_point(but: str = "") -> None:
    for name, point in POINTS.items():
        if name != but:
            for _ in range(3):
                assert fault_point(name, "orders" if point.scope else "") is None


def test_without_the_variable_every_point_is_a_no_op(monkeypatch, no_crash) -> None:
    monkeypatch.delenv(faults.ENV, raising=False)
    hit_every_point()
    assert no_crash == []
    assert faults.hits() == {}
    # Another point named: none of the others fires or counts, and the named one does fire.
    monkeypatch.setenv(faults.ENV, "audit.keys_committed:fail-first-attempt")
    hit_every_point(but="audit.keys_committed")
    assert no_crash == []
    assert faults.hits() == {}
    with pytest.raises(FaultInjected):
        fault_point("audit.keys_committed")
    # A crash at one scope: the point's hits at another scope do not fire it.
    monkeypatch.setenv(faults.ENV, f"{AFTER_DISPATCH}/orders")
    fault_point(AFTER_DISPATCH, "orders-r1")
    assert no_crash == []
    fault_point(AFTER_DISPATCH, "orders")
    assert no_crash == [f"{AFTER_DISPATCH}/orders (hit 1)"]


def test_fail_first_attempt_fails_the_nth_hit_only(monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV, "audit.keys_committed@2:fail-first-attempt")
    fault_point("audit.keys_committed")
    fault_point("replication.record_acked")  # another point: not counted with it
    with pytest.raises(FaultInjected, match=r"audit.keys_committed \(hit 2\)"):
        fault_point("audit.keys_committed")
    fault_point("audit.keys_committed")  # the retry goes through


def test_pause_sleeps_at_the_nth_hit_then_the_step_goes_on(monkeypatch, capsys) -> None:
    slept: list[float] = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    monkeypatch.setenv(faults.ENV, "replication.tail_read@2:pause=1500")
    for _ in range(3):
        fault_point("replication.tail_read")
    assert slept == [1.5]
    assert "UATU_FAULT: pause 1500 ms at replication.tail_read (hit 2)" in capsys.readouterr().err


def test_an_undeclared_point_or_a_wrong_scope_is_a_programming_error(monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV, "audit.keys_committed")
    with pytest.raises(ValueError, match="not declared"):
        fault_point("audit.no_such_step")
    with pytest.raises(ValueError, match="scope"):
        fault_point("audit.keys_committed", "orders")
    with pytest.raises(ValueError, match="scope"):
        fault_point(AFTER_DISPATCH)


@pytest.mark.parametrize(
    ("value", "job_type"),
    [
        ("", AUDIT),
        ("audit.keys_committed@2,audit.counts_merging", AUDIT),
        ("replication.record_acked@300", REPLICATION),
        ("dispatch.before_checkpoint/orders,dispatch.after_tier_produce", DISPATCH),
    ],
)
def test_a_job_takes_the_points_its_runs_reach(value: str, job_type: str) -> None:
    assert for_job({faults.ENV: value}, job_type) == parse(value)


@pytest.mark.parametrize(
    ("value", "job_type", "point"),
    [
        ("dispatch.before_checkpoint/orders", AUDIT, "dispatch.before_checkpoint"),
        ("audit.keys_committed,replication.epoch_logged", AUDIT, "replication.epoch_logged"),
        ("audit.partials_saved", DISPATCH, "audit.partials_saved"),
        ("availability.probe_end_offset", REPLICATION, "availability.probe_end_offset"),
        ("replication.record_acked", "JOB_TYPE_LOAD_GEN_PRODUCE", "replication.record_acked"),
    ],
)
def test_a_point_the_job_never_reaches_is_refused(value: str, job_type: str, point: str) -> None:
    with pytest.raises(ConfigError) as caught:
        for_job({faults.ENV: value}, job_type)
    assert caught.value.exit_status == EXIT_BAD_INPUT
    assert f"{faults.ENV}: {point!r}: a {job_type} run never reaches this point" in str(
        caught.value
    )


AUDIT_GROUP = {
    "jobGroupId": "orders-audit",
    "type": AUDIT,
    "kafkaConsumerTaskGroup": {
        "cluster": "local",
        "topic": "orders",
        "auditMetadata": {
            "auditConfigs": [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}]
        },
    },
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "dispatch.before_checkpoint/orders",
            "error: configuration error in UATU_FAULT: 'dispatch.before_checkpoint': a "
            "JOB_TYPE_KAFKA_AUDIT run never reaches this point",
        ),
        # A point the audit reaches passes: main goes on to the cluster, whose client refuses
        # its properties.
        ("audit.keys_committed@2", "configuration error in clusters.yaml: clusters.local"),
    ],
)
def test_the_job_refuses_an_unreachable_point_at_start(
    tmp_path: Path, monkeypatch, capsys, value: str, expected: str
) -> None:
    """Through `jobs/main.py --check`: exit 2 and one line naming UATU_FAULT and the point,
    before the step after it, where the admin client refuses a Java-only property of the
    cluster that the translation does not know (librdkafka's name is fetch.wait.max.ms), and
    would next ask port 9 on loopback, where nothing answers."""
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    (conf / "clusters.yaml").write_text(
        "clusters:\n  local:\n    bootstrap_servers: 127.0.0.1:9\n"
        "    properties: {fetch.max.wait.ms: '500'}\n"
    )
    path = tmp_path / "group.json"
    path.write_text(json.dumps(AUDIT_GROUP))
    monkeypatch.setenv(faults.ENV, value)
    assert job_main.main([str(path), "--check", "--conf-dir", str(conf)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert expected in err


# The JobType whose runs execute the code under each folder (or in each file, where a folder
# holds two JobTypes' code): the truth each point's `job_types` is checked against, through
# the files the point is placed in.
RUN_BY = {
    "jobs/audit/": AUDIT,
    "jobs/replication/": REPLICATION,
    "jobs/availability/": "JOB_TYPE_KAFKA_AVAILABILITY",
    "jobs/dispatch/": DISPATCH,
    "jobs/loadgen/generator.py": "JOB_TYPE_LOAD_GEN_PRODUCE",
    "jvm/src/main/java/dev/uatu/audit/": AUDIT,
    "jvm/src/main/java/dev/uatu/fold/": AUDIT,
    "jvm/src/main/java/dev/uatu/replication/": REPLICATION,
    "jvm/src/main/java/dev/uatu/dispatch/": DISPATCH,
    "jvm/src/main/java/dev/uatu/loadgen/ProduceTask.java": "JOB_TYPE_LOAD_GEN_PRODUCE",
    "controlplane/": CONTROL_PLANE,
    "jobs/worker/": WORKER,
}
NOT_SCANNED = {"tests", "var", "build", "node_modules", "target"}  # and hidden folders
JAVA_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
JAVA_PLACEMENT = re.compile(r"\bFaultPoints\.(?:hit|failure)\(")
JAVA_LITERAL = re.compile(r'\s*"([^"\\]*)"\s*([,)])')


@functools.cache
def placements() -> list[tuple[str, str | None, bool]]:
    """Every placement of a fault point in the project's code: (file under ROOT, the name if
    it is a string literal else None, placed with a scope)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in NOT_SCANNED and not d.startswith(".")]
        for file in files:
            path = Path(folder) / file
            relative = path.relative_to(ROOT).as_posix()
            if file.endswith(".py"):
                found += [(relative, *p) for p in python_placements(path.read_text())]
            elif file.endswith(".java"):
                code = JAVA_COMMENT.sub("", path.read_text())
                for call in JAVA_PLACEMENT.finditer(code):
                    literal = JAVA_LITERAL.match(code, call.end())
                    name = literal.group(1) if literal else None
                    found.append((relative, name, bool(literal) and literal.group(2) == ","))
    return found


def python_placements(source: str) -> list[tuple[str | None, bool]]:
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called != "fault_point":
            continue
        first = node.args[0] if node.args else None
        literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
        name = first.value if isinstance(first, ast.Constant) and literal else None
        calls.append((name, len(node.args) + len(node.keywords) > 1))
    return calls


def test_every_declared_point_is_placed_and_every_placed_point_declared() -> None:
    """A declared point nobody reaches would make its drill a silent no-op; a placed name that
    is not declared would never fire (the JVM does not check it)."""
    found = placements()
    assert [(f, n) for f, n, _ in found if n is None] == [], "a placement without a literal"
    placed = {n for _, n, _ in found}
    assert sorted(set(POINTS) - placed) == [], "declared in core/faults.py, never placed"
    assert sorted((f, n) for f, n, _ in found if n not in POINTS) == [], "placed, undeclared"
    for file, name, scoped in found:
        assert name is not None
        assert scoped == bool(POINTS[name].scope), f"{file}: {name} placed with scope={scoped}"


def test_each_point_names_the_job_types_that_run_its_placements() -> None:
    assert set(RUN_BY.values()) - {CONTROL_PLANE, WORKER} <= set(JOB_TYPES)
    reached: dict[str, set[str]] = {}
    for file, name, _ in placements():
        folders = [f for f in RUN_BY if file.startswith(f)]
        assert name is not None and folders, f"{file} places {name}: which JobType runs it?"
        reached.setdefault(name, set()).add(RUN_BY[folders[0]])
    assert {n: set(p.job_types) for n, p in POINTS.items()} == reached


def test_crash_kills_the_whole_process_group_at_the_nth_hit(tmp_path) -> None:
    """A driver with a child (as spark-submit.sh has a JVM): both die at the second hit."""
    child_pid = tmp_path / "child.pid"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from core.faults import fault_point
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(child_pid)!r}, "w").write(str(child.pid))
        fault_point("audit.keys_committed")
        print("first hit passed", flush=True)
        fault_point("audit.keys_committed")
        print("not reached", flush=True)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, faults.ENV: "audit.keys_committed@2", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout == "first hit passed\n"
    assert "UATU_FAULT: crash at audit.keys_committed (hit 2)" in proc.stderr
    pid = int(child_pid.read_text())
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid), "the child in the same process group survived"
