"""A KAFKA_AUDIT group over a topic selection (extension.topics), without a broker: what its
spec says, the Kafka source options it gets, the refusals (exit 2, one line), its heartbeat
statuses, and the pure step that finds a topic deleted between two micro-batches."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from core.config import ClusterConfig, Settings
from core.errors import EXIT_BAD_INPUT, InvalidJobGroup
from core.jobgroup import parse_jobgroup
from jobs import main as job_main
from jobs import registry
from jobs.runtime.kafka_source import SELECTION_METADATA_MAX_AGE_MS, source_read_options
from jobs.runtime.progress import JobIdentity, partition_statuses
from jobs.runtime.source_failure import DELETED_END, LostRange, vanished
from testing.conf import write_conf_dir

LOCAL = ClusterConfig("local", "b:9092", MappingProxyType({}))
SETTINGS = Settings(
    conf_dir=Path("conf"),
    warehouse="/wh",
    checkpoints="/ck",
    clusters=MappingProxyType({"local": LOCAL}),
)


def group(topic: str = "", topics: dict | None = None, audit_topic: str = "") -> dict:
    data: dict = {
        "jobGroupId": "sel",
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}
                ]
            },
        },
        "extension": {"@type": "type.googleapis.com/uatu.v1.JobOptions"},
    }
    if topics is not None:
        data["extension"]["topics"] = topics
    if audit_topic:
        data["auditTaskGroup"] = {"topic": audit_topic}
    return data


def spec_of(data: dict):
    _, spec = registry.validate(parse_jobgroup(json.dumps(data)), SETTINGS)
    return spec


def test_a_pattern_group_is_a_selection_labelled_by_each_records_topic():
    spec = spec_of(group(topics={"pattern": "orders\\..*", "excludePattern": ".*dlq"}))
    assert spec.many_topics
    assert spec.audited_topic == ""
    assert spec.source.selection is not None
    assert spec.required_topic().selection == spec.source.selection
    assert not spec_of(group("orders")).many_topics


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (group("orders", {"names": ["a"]}), "kafka_consumer_task_group.topic"),
        (group(), "kafka_consumer_task_group.topic"),
        (group(topics={"pattern": "a.*"}, audit_topic="label"), "audit_task_group.topic"),
    ],
    ids=["topic-and-topics", "neither", "audit-label-with-a-selection"],
)
def test_exactly_one_of_topic_and_topics_and_no_topic_label_for_a_selection(data, field):
    with pytest.raises(InvalidJobGroup) as refused:
        spec_of(data)
    assert refused.value.field == field


def test_a_topic_label_with_a_selection_exits_2_with_one_line(tmp_path, capsys):
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:1", tmp_path / "wh", tmp_path / "ck")
    path = tmp_path / "g.json"
    path.write_text(json.dumps(group(topics={"pattern": "a.*"}, audit_topic="label")))
    assert job_main.main([str(path), "--conf-dir", str(conf)]) == EXIT_BAD_INPUT
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert "audit_task_group.topic='label'" in lines[0]


def test_only_a_pattern_read_with_the_jobs_own_loss_checks_turns_failondataloss_off():
    pattern = spec_of(group(topics={"pattern": "a.*"})).source
    names = spec_of(group(topics={"names": ["a", "b"]})).source
    one = spec_of(group("a")).source

    options = source_read_options(pattern, own_loss_checks=True)
    assert options["subscribePattern"] == pattern.selection.regex
    assert options["failOnDataLoss"] == "false"
    assert options["kafka.metadata.max.age.ms"] == str(SELECTION_METADATA_MAX_AGE_MS)
    assert source_read_options(pattern)["failOnDataLoss"] == "true"
    by_name = source_read_options(names, own_loss_checks=True)
    assert (by_name["subscribe"], by_name["failOnDataLoss"]) == ("a,b", "true")
    assert by_name["kafka.metadata.max.age.ms"] == str(SELECTION_METADATA_MAX_AGE_MS)
    single = source_read_options(one, own_loss_checks=True)
    assert single["failOnDataLoss"] == "true"
    assert "kafka.metadata.max.age.ms" not in single


def test_vanished_names_the_partitions_of_a_deleted_or_recreated_topic_only():
    before = {"kept": {0: 5, 1: 7}, "gone": {0: 3, 1: 4}, "recreated": {0: 9}}
    after = {"kept": {0: 6, 1: 7}, "recreated": {0: 2}, "new": {0: 1}}
    assert vanished(before, after) == {
        "gone": [LostRange(0, 3, DELETED_END), LostRange(1, 4, DELETED_END)],
        "recreated": [LostRange(0, 9, DELETED_END)],
    }
    assert vanished(before, before) == {}


def test_a_selections_heartbeat_statuses_name_each_topic_partition():
    """Progress of a query over two topics: a selection's identity (topic "") reports every
    (topic, partition) with its own topic and rate; a one-topic identity only its topic."""
    progress = {
        "batchDuration": 2000,
        "sources": [
            {
                "startOffset": json.dumps({"a": {"0": 0, "1": 0}, "b": {"0": 10}}),
                "endOffset": json.dumps({"a": {"0": 4, "1": 6}, "b": {"0": 20}}),
            }
        ],
    }
    selection = JobIdentity(1, "local", "")
    got = {
        (s.job.kafka_consumer_task.topic, s.job.kafka_consumer_task.partition): (
            s.kafka_consumer_task_status.commit_offset,
            s.kafka_consumer_task_status.messages_per_sec,
        )
        for s in partition_statuses(progress, None, selection, None)
    }
    assert got == {("a", 0): (4, 2.0), ("a", 1): (6, 3.0), ("b", 0): (20, 5.0)}
    one = partition_statuses(progress, None, JobIdentity(1, "local", "b"), None)
    assert [
        (s.job.kafka_consumer_task.topic, s.job.kafka_consumer_task.partition) for s in one
    ] == [("b", 0)]
