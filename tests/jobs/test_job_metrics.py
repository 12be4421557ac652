"""The driver's Prometheus metrics: the names and labels existing dashboards use, from the rows
the jobs write (pure updates; the scrape by a real Prometheus is in
tests/integrations/test_prometheus.py)."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobs.audit import metrics as audit_metrics
from jobs.audit.tiers import metrics as tier_metrics
from jobs.availability import metrics as availability_metrics
from jobs.replication import metrics as replication_metrics
from jobs.runtime import metrics


@pytest.fixture(autouse=True)
def no_series_from_earlier_jobs() -> None:
    """The registry is the process's: jobs run in-process by earlier tests of this worker
    left their series in it."""
    metrics.clear_series()


def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{sorted labels: value} of every sample called `name` in the driver's registry."""
    text = generate_latest(metrics.REGISTRY).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def group_row(group: str, status: str, lag: int, time_lag_ms: int | None = 2500) -> dict:
    return {
        "group": group,
        "status": status,
        "total_lag": lag,
        "partitions": [
            {
                "topic": "orders",
                "partition": 0,
                "current_lag": lag,
                "complete": 1.0,
                "end_offset": 40,
                "time_lag_ms": time_lag_ms,
            }
        ],
    }


def test_consumer_groups_use_burrows_and_kafka_lag_exporters_names() -> None:
    availability_metrics.consumer_groups(
        "main",
        [
            group_row("billing", "ERR", 7),
            group_row("gone", "NOTFOUND", 0),
            {"group": "idle", "status": "NO_COMMITS", "partitions": []},
        ],
    )
    status = samples("burrow_kafka_consumer_status")
    assert status == {(("cluster", "main"), ("consumer_group", "billing")): 3.0}  # ERR
    assert (
        samples("burrow_kafka_consumer_lag_total")[
            (("cluster", "main"), ("consumer_group", "billing"))
        ]
        == 7
    )
    partition = (("cluster", "main"), ("consumer_group", "billing"), ("partition", "0"))
    assert samples("burrow_kafka_consumer_partition_lag")[(*partition, ("topic", "orders"))] == 7
    assert samples("burrow_kafka_consumer_current_offset")[(*partition, ("topic", "orders"))] == 40
    seconds = samples("kafka_consumergroup_group_max_lag_seconds")
    assert list(seconds.values()) == [2.5]
    assert dict(next(iter(seconds)))["group"] == "billing"
    assert samples("uatu_consumer_group_without_commits") == {
        (("cluster", "main"), ("consumer_group", "idle")): 1.0
    }


def test_a_group_gone_from_the_next_evaluation_is_removed() -> None:
    availability_metrics.consumer_groups("c2", [group_row("a", "OK", 1), group_row("b", "WARN", 2)])
    availability_metrics.consumer_groups("c2", [group_row("b", "WARN", 3)])
    groups = {dict(k)["consumer_group"] for k in samples("burrow_kafka_consumer_status")}
    assert "a" not in groups and "b" in groups


def test_probes_take_kminions_end_to_end_shape() -> None:
    base = {"ack_latency_ms": 12.0, "e2e_latency_ms": 30.0}
    availability_metrics.probes(
        [
            {"partition": 7, "produced": True, "copies": 1, **base},
            {"partition": 7, "produced": True, "copies": 0, **base},
            {"partition": 7, "produced": False, "copies": 0, "ack_latency_ms": None},
        ]
    )
    label = (("partition_id", "7"),)
    assert samples("kminion_end_to_end_messages_produced_total")[label] == 3
    assert samples("kminion_end_to_end_messages_produced_failed_total")[label] == 1
    assert samples("kminion_end_to_end_messages_received_total")[label] == 1
    assert samples("kminion_end_to_end_messages_lost_total")[label] == 1
    assert samples("kminion_end_to_end_roundtrip_latency_seconds_count")[label] == 1
    assert samples("kminion_end_to_end_produce_latency_seconds_count")[label] == 2


def test_replication_uses_mirrormaker2s_names() -> None:
    labels = {
        "job_group_id": "dr",
        "source_cluster": "main",
        "destination_cluster": "dr",
    }
    row = {
        "source_topic": "orders",
        "destination_topic": "orders",
        "partition": 1,
        "destination_partition": 1,
        "records_replicated": 10,
        "records_already_present": 2,
        "bytes_replicated": 100,
        "record_age_ms_min": 5,
        "record_age_ms_avg": 7.5,
        "record_age_ms_max": 9,
        "replication_latency_ms_min": 20,
        "replication_latency_ms_avg": 25.0,
        "replication_latency_ms_max": 40,
    }
    replication_metrics.replication(labels, [row, row])
    mm2 = (("partition", "1"), ("source", "main"), ("target", "dr"), ("topic", "orders"))
    mm2_name = "kafka_connect_mirror_mirrorsourceconnector_"
    assert samples(f"{mm2_name}replication_latency_ms_max")[mm2] == 40
    assert samples(f"{mm2_name}record_age_ms_avg")[mm2] == 7.5
    assert samples(f"{mm2_name}record_count")[mm2] == 20
    present = samples("uatu_replication_records_already_present_total")
    assert sum(present.values()) == 4


def test_audit_windows_count_mark_complete_and_stay_bounded() -> None:
    now = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    rows = []
    for minutes_ago in range(6, 0, -1):  # six one-minute windows, the newest still open
        start = now - timedelta(minutes=minutes_ago)
        rows.append(
            {
                "cluster": "main",
                "topic": "pay",
                "partition": 0,
                "audit_type": "AUDIT_TYPE_EXACT_UNIQ",
                "audit_interval_seconds": 60,
                "window_start": start,
                "window_end": start + timedelta(minutes=1),
                "message_count": 10,
                "duplicate_count": 1,
                "bytes": 100,
                "late_count": 0,
                "no_event_time_count": 0,
            }
        )
    audit_metrics.audit_windows(rows, {60: 60}, now)
    windows = {dict(k)["window_start"]: v for k, v in samples("uatu_audit_window_complete").items()}
    assert len(windows) == audit_metrics.AUDIT_WINDOWS_KEPT
    newest = (now - timedelta(minutes=1)).isoformat()
    assert windows[newest] == 0  # ends now; the lateness has not passed
    assert windows[(now - timedelta(minutes=3)).isoformat()] == 1
    total = samples("uatu_audit_messages_total")
    assert (
        total[
            (
                ("audit_type", "AUDIT_TYPE_EXACT_UNIQ"),
                ("cluster", "main"),
                ("partition", "0"),
                ("topic", "pay"),
            )
        ]
        == 60
    )


def test_file_sd_targets_name_both_endpoints_of_an_application(tmp_path) -> None:
    group = {"job_group_id": "orders-audit"}
    path = metrics.write_sd_file(tmp_path / "sd", "orders-audit", "host1", 9400, 4041, group)
    assert path.name == "orders-audit.json"
    groups = json.loads(path.read_text())
    assert groups[0] == {"targets": ["host1:9400"], "labels": group}
    assert groups[1] == {
        "targets": ["host1:4041"],
        "labels": {"job_group_id": "orders-audit", "__metrics_path__": "/metrics/prometheus"},
    }
    assert metrics.sd_targets({"worker": "3"}, "h", 1, None) == [
        {"targets": ["h:1"], "labels": {"worker": "3"}}
    ]


def test_an_endpoint_started_with_a_sd_dir_names_itself_there(tmp_path) -> None:
    """What the control plane's /sd serves: a worker's file, labelled as the worker asked."""
    env = {"UATU_METRICS_PORT": "0", "UATU_METRICS_HOST": "127.0.0.1"}
    endpoint = metrics.start(
        {**env, "UATU_METRICS_SD_DIR": str(tmp_path)}, "worker-3", None, {"worker": "3"}
    )
    assert endpoint is not None
    try:
        groups = json.loads((tmp_path / "worker-3.json").read_text())
        assert groups == [{"targets": [f"127.0.0.1:{endpoint.port}"], "labels": {"worker": "3"}}]
    finally:
        endpoint.stop()
    assert not (tmp_path / "worker-3.json").exists()  # gone with the endpoint
    assert not metrics.serving()
    with pytest.raises(OSError):  # and nothing listens on its port any more
        socket.create_connection(("127.0.0.1", endpoint.port), timeout=2).close()


def verdict_row(window_start: int, revision: int, verdict: str, difference: int, **more) -> dict:
    return {
        "job_group_id": "tiers-metrics",
        "check_type": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION",
        "check_name": "service->kafka",
        "cluster": "local",
        "topic": "orders",
        "window_start": window_start,
        "revision": revision,
        "verdict": verdict,
        "difference": difference,
        "left_unique": None,
        "right_unique": None,
        "missing_count": None,
        **more,
    }


def test_verdicts_count_every_revision_and_show_the_newest_window() -> None:
    tier_metrics.verdicts([verdict_row(60_000, 1, "LOSS", -5), verdict_row(120_000, 1, "OK", 0)])
    tier_metrics.verdicts([verdict_row(60_000, 2, "LOSS", -7)])  # an older window revised
    check = (
        ("check_name", "service->kafka"),
        ("check_type", "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION"),
        ("cluster", "local"),
        ("job_group_id", "tiers-metrics"),
        ("topic", "orders"),
    )
    rows = samples("uatu_audit_verdicts_total")
    assert rows == {
        tuple(sorted((*check, ("verdict", "LOSS")))): 2.0,
        tuple(sorted((*check, ("verdict", "OK")))): 1.0,
    }
    assert samples("uatu_audit_check_verdict") == {check: 0.0}  # window 120000: OK
    assert samples("uatu_audit_check_lost_records") == {check: 0.0}
    tier_metrics.verdicts([verdict_row(120_000, 2, "LOSS", -3)])  # the newest window revised
    assert samples("uatu_audit_check_verdict") == {check: 1.0}
    assert samples("uatu_audit_check_lost_records") == {check: 3.0}


@pytest.mark.parametrize(
    ("row", "lost", "duplicated"),
    [
        (verdict_row(0, 1, "LOSS", -5), 5, 0),
        (verdict_row(0, 1, "LOSS", 0, left_unique=50, right_unique=47), 3, 0),  # hidden by dups
        (verdict_row(0, 1, "LOSS", -2, missing_count=4), 4, 0),  # REPLICATION's missing offsets
        (verdict_row(0, 1, "DUPLICATION", 6), 0, 6),
        (verdict_row(0, 1, "INCOMPLETE", -9), 0, 0),  # not final: no loss stated yet
        (verdict_row(0, 1, "OK", -1), 0, 0),  # within the threshold
    ],
)
def test_a_verdict_states_its_lost_and_duplicated_records(row, lost, duplicated) -> None:
    assert tier_metrics.lost_and_duplicated(row) == (lost, duplicated)
