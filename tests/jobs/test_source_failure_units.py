"""Pure parts of the source-fault handling: which offsets were lost
(`jobs/runtime/source_failure.lost_ranges`), which of them are not recorded yet (`unrecorded`),
where `--skip-lost-records` lets a planned range start (`SourceGaps.skip`), and the
replication plan for source partitions added while the job runs
(`jobs/replication/preflight.with_partitions`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import EXIT_BAD_INPUT
from jobs import main as job_main
from jobs.replication.preflight import ReplicationPlan, with_partitions
from jobs.runtime.source_failure import (
    NO_GAPS,
    LostRange,
    SourceGaps,
    lost_ranges,
    read_past,
    unrecorded,
)
from jobs.runtime.tables import data_loss_path
from testing.conf import write_conf_dir
from testing.jobgroups import minimal_group


def test_lost_ranges_are_the_offsets_between_the_checkpoint_and_the_earliest_kept() -> None:
    resume_at = {0: 10, 1: 5, 2: 7, 3: 0}
    earliest = {0: 20, 1: 5, 2: 3, 4: 9}  # 1 intact, 2 already past, 3 gone, 4 never read
    assert lost_ranges(resume_at, earliest) == [LostRange(0, 10, 20)]


def test_nothing_is_lost_when_nothing_was_deleted() -> None:
    assert lost_ranges({0: 4, 1: 0}, {0: 0, 1: 0}) == []


def test_a_loss_found_again_is_recorded_once_and_only_its_growth_is_new() -> None:
    recorded = [LostRange(0, 10, 20), LostRange(1, 0, 5)]
    assert unrecorded([LostRange(0, 10, 20)], recorded) == []
    # Retention went on: only [20, 30) is new; partition 2 is new altogether.
    assert unrecorded([LostRange(0, 10, 30), LostRange(2, 4, 6)], recorded) == [
        LostRange(0, 20, 30),
        LostRange(2, 4, 6),
    ]


def test_unrecorded_leaves_the_holes_between_recorded_ranges() -> None:
    recorded = [LostRange(0, 12, 14), LostRange(0, 16, 18), LostRange(1, 0, 100)]
    assert unrecorded([LostRange(0, 10, 20)], recorded) == [
        LostRange(0, 10, 12),
        LostRange(0, 14, 16),
        LostRange(0, 18, 20),
    ]


def test_a_range_starting_in_a_gap_is_read_from_its_end_and_no_other_is_moved() -> None:
    gaps = SourceGaps({0: LostRange(0, 10, 20)})
    assert gaps.skip(0, 10, 50) == 20  # the replayed batch after the failure
    assert gaps.skip(0, 14, 17) == 17  # a batch inside the gap (maxOffsetsPerTrigger): empty
    assert gaps.skip(0, 20, 50) == 20  # past the gap: as planned, so a later loss fails
    assert gaps.skip(0, 5, 50) == 5  # before the gap: not this run's start, read as planned
    assert gaps.skip(1, 10, 50) == 10  # another partition
    assert NO_GAPS.skip(0, 10, 50) == 10
    assert not NO_GAPS and gaps


def test_read_past_moves_only_ranges_starting_in_a_gap_and_drops_emptied_ones() -> None:
    gaps = SourceGaps({0: LostRange(0, 10, 20), 1: LostRange(1, 0, 5)})
    planned = [(0, 10, 30), (1, 0, 3), (2, 0, 9)]
    assert read_past(gaps, planned, "batch 3") == [(0, 20, 30), (2, 0, 9)]
    assert read_past(NO_GAPS, planned, "batch 3") == planned


def test_the_loss_table_sits_beside_the_jobs_first_table() -> None:
    assert data_loss_path("/wh/audit_counts") == "/wh/source_data_loss"
    assert data_loss_path("s3a://b/wh/stats/") == "s3a://b/wh/source_data_loss"


def test_new_partitions_keep_their_number_under_the_identity_mapping() -> None:
    plan = ReplicationPlan(source_partitions=(0, 1), destination_partitions=2, modulo=False)
    grown = with_partitions(plan, {2, 3}, 4)
    assert grown.source_partitions == (0, 1, 2, 3)
    assert grown.destination_partitions == 4
    assert [grown.destination_partition(p) for p in range(4)] == [0, 1, 2, 3]


def test_a_modulo_plan_keeps_its_destination_count_so_no_mapping_moves() -> None:
    plan = ReplicationPlan(source_partitions=(0, 1, 2), destination_partitions=2, modulo=True)
    grown = with_partitions(plan, {3, 4}, 5)
    assert grown.destination_partitions == 2
    assert [grown.destination_partition(p) for p in range(5)] == [0, 1, 0, 1, 0]


@pytest.mark.parametrize(
    "kind", ["tier-audit", "availability", "loadgen-produce", "loadgen-consume"]
)
def test_skip_lost_records_is_refused_by_a_job_that_cannot(kind, tmp_path: Path, capsys) -> None:
    """Exit 2 with one line naming the flag, before any broker is asked (port 9: nothing
    answers there)."""
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    path = tmp_path / "group.json"
    path.write_text(json.dumps(minimal_group(kind, f"skip-{kind}")))

    status = job_main.main([str(path), "--skip-lost-records", "--conf-dir", str(conf)])

    lines = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_BAD_INPUT
    assert len(lines) == 1
    assert lines[0].startswith("error: configuration error in --skip-lost-records: JOB_TYPE_")
