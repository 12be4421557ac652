"""Pure parts of the source-fault handling: which offsets were lost
(`jobs/runtime/source_failure.lost_ranges`) and the replication plan for source partitions
added while the job runs (`jobs/replication/preflight.with_partitions`)."""

from __future__ import annotations

from jobs.replication.preflight import ReplicationPlan, with_partitions
from jobs.runtime.source_failure import LostRange, lost_ranges
from jobs.runtime.tables import data_loss_path


def test_lost_ranges_are_the_offsets_between_the_checkpoint_and_the_earliest_kept() -> None:
    resume_at = {0: 10, 1: 5, 2: 7, 3: 0}
    earliest = {0: 20, 1: 5, 2: 3, 4: 9}  # 1 intact, 2 already past, 3 gone, 4 never read
    assert lost_ranges(resume_at, earliest) == [LostRange(0, 10, 20)]


def test_nothing_is_lost_when_nothing_was_deleted() -> None:
    assert lost_ranges({0: 4, 1: 0}, {0: 0, 1: 0}) == []


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
