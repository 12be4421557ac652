"""When a bounded or --once run is over (`offsets.is_drained`), and the fault hook's settings."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from jobs.dispatch.faults import Fault, fault_from_env
from jobs.dispatch.offsets import Bounds, is_drained, resolved_start


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


def test_a_tier_emptied_by_retention_counts_as_read() -> None:
    assert is_drained({0: 1}, {0: 1}, {"r1": ({}, {0: (7, 7)})})


def test_resolved_start_of_explicit_offsets_and_latest() -> None:
    ends = {0: 10, 1: 20}
    assert resolved_start(Bounds({0: 3, 1: 4}, ends), None, "t", ends) == {0: 3, 1: 4}  # type: ignore[arg-type]
    assert resolved_start(Bounds("latest", ends), None, "t", ends) == ends  # type: ignore[arg-type]


def test_fault_hook_is_off_unless_set() -> None:
    assert fault_from_env({}) is None
    assert fault_from_env({"UATU_DISPATCH_FAULT": " "}) is None


def test_fault_hook_step_and_topic() -> None:
    fault = fault_from_env({"UATU_DISPATCH_FAULT": "after_tier_produce:orders"})
    assert fault == Fault("after_tier_produce", "orders")
    assert fault.matches("after_tier_produce", "orders")
    assert not fault.matches("after_tier_produce", "orders-r1")
    assert not fault.matches("before_checkpoint", "orders")
    assert Fault("before_checkpoint").matches("before_checkpoint", "any")


def test_an_unknown_step_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="UATU_DISPATCH_FAULT"):
        fault_from_env({"UATU_DISPATCH_FAULT": "sometime"})
