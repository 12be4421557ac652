"""When a bounded or --once run is over (`offsets.is_drained`), where a new checkpoint starts
from its consumer group's commits (`offsets.start_from_commits`), and the dispatcher's points of
the fault hook (`core/faults.py`: `dispatch.after_tier_produce`, `dispatch.after_dispatch`,
`dispatch.before_checkpoint`, each limited to one query by `/<topic>`)."""

from __future__ import annotations

import os

import pytest

from core import faults
from core.errors import ConfigError
from core.faults import FAIL_FIRST_ATTEMPT, Fault, FaultInjected, fault_point, for_job
from jobs.dispatch.offsets import Bounds, is_drained, resolved_start, start_from_commits

DISPATCH = "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER"
STEPS = ("dispatch.after_tier_produce", "dispatch.after_dispatch", "dispatch.before_checkpoint")


def test_drained_when_the_source_reached_its_ends_and_every_tier_its_high_watermarks() -> None:
    tiers = {"r1": ({0: 5, 1: 3}, {0: (0, 5), 1: (0, 3)}), "resq": ({}, {0: (0, 0)})}
    assert is_drained({0: 10, 1: 4}, {0: 10, 1: 4}, tiers)


@pytest.mark.parametrize(
    ("position", "tiers"),
    [
        ({0: 9, 1: 4}, {}),  # the source is one record short
        ({1: 4}, {}),  # partition 0 never read
        ({0: 10, 1: 4}, {"r1": ({0: 4}, {0: (0, 5)})}),  # a tier record left (not yet due)
        ({0: 10, 1: 4}, {"r1": ({}, {0: (2, 3)})}),  # a tier never read, one record in it
    ],
)
def test_not_drained(position, tiers) -> None:
    assert not is_drained(position, {0: 10, 1: 4}, tiers)


RANGES = {0: (10, 50), 1: (0, 30), 2: (5, 5)}  # partition: (low, high) watermarks


@pytest.mark.parametrize(
    ("policy", "commits", "start"),
    [
        ("earliest", {0: 20, 1: 30}, {0: 20, 1: 30, 2: 5}),  # resumes at each commit
        ("latest", {0: 20}, {0: 20, 1: 30, 2: 5}),  # no commit: the policy, here the end
        ("earliest", {0: 20}, {0: 20, 1: 0, 2: 5}),  # no commit: the policy, here the start
        ("earliest", {0: 4}, {0: 10, 1: 0, 2: 5}),  # below the log start: the log start
        ("earliest", {1: 31}, {0: 10, 1: 0, 2: 5}),  # past the end (recreated): the policy
        ("latest", {0: 50, 1: 31}, {0: 50, 1: 30, 2: 5}),  # at the end stays; past: the policy
    ],
)
def test_a_new_checkpoint_resumes_where_the_group_committed(policy, commits, start) -> None:
    assert start_from_commits(policy, commits, RANGES) == start


def test_a_group_without_commits_on_the_topic_leaves_the_start_to_the_policy() -> None:
    assert start_from_commits("latest", {}, RANGES) is None
    assert start_from_commits("earliest", {7: 3}, RANGES) is None  # another topic's partition


def test_a_tier_emptied_by_retention_counts_as_read() -> None:
    assert is_drained({0: 1}, {0: 1}, {"r1": ({}, {0: (7, 7)})})


def test_resolved_start_of_explicit_offsets_and_latest() -> None:
    ends = {0: 10, 1: 20}
    assert resolved_start(Bounds({0: 3, 1: 4}, ends), None, "t", ends) == {0: 3, 1: 4}  # type: ignore[arg-type]
    assert resolved_start(Bounds("latest", ends), None, "t", ends) == ends  # type: ignore[arg-type]


@pytest.fixture
def fresh_counts():
    faults.reset()
    yield
    faults.reset()


def test_the_dispatch_points_are_off_unless_set(monkeypatch, fresh_counts) -> None:
    monkeypatch.delenv(faults.ENV, raising=False)
    for step in STEPS:
        fault_point(step, "orders")
    assert faults.hits() == {}
    assert for_job({}, DISPATCH) == ()


def test_a_dispatch_point_limited_to_one_topic(monkeypatch, fresh_counts) -> None:
    """The old `<step>:<topic>` filter, in the one syntax: `<point>/<topic>`."""
    monkeypatch.setenv(faults.ENV, "dispatch.after_tier_produce/orders:fail-first-attempt")
    assert for_job(os.environ, DISPATCH) == (
        Fault("dispatch.after_tier_produce", 1, FAIL_FIRST_ATTEMPT, scope="orders"),
    )
    fault_point("dispatch.after_tier_produce", "orders-r1")  # a tier's query: not this one
    fault_point("dispatch.before_checkpoint", "orders")  # another step
    with pytest.raises(FaultInjected, match=r"dispatch.after_tier_produce/orders \(hit 1\)"):
        fault_point("dispatch.after_tier_produce", "orders")


def test_a_dispatch_point_without_a_topic_fires_at_any(monkeypatch, fresh_counts) -> None:
    monkeypatch.setenv(faults.ENV, "dispatch.before_checkpoint:fail-first-attempt")
    with pytest.raises(FaultInjected, match=r"dispatch.before_checkpoint \(hit 1\)"):
        fault_point("dispatch.before_checkpoint", "any")


def test_an_unknown_step_or_another_jobs_point_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as unknown:
        for_job({faults.ENV: "dispatch.sometime"}, DISPATCH)
    assert "UATU_FAULT: 'dispatch.sometime': unknown point" in str(unknown.value)
    with pytest.raises(ConfigError) as unreached:
        for_job({faults.ENV: "audit.keys_committed"}, DISPATCH)
    assert f"'audit.keys_committed': a {DISPATCH} run never reaches" in str(unreached.value)
