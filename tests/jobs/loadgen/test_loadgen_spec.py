"""LOAD_GEN_PRODUCE / LOAD_GEN_CONSUME validation: bad input exits 2 with one line naming the
field and the value, before any broker or Spark work; the documented defaults."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from core.errors import InvalidJobGroup
from core.jobgroup import check_common, load_jobgroup
from core.paths import ROOT
from jobs import main as job_main
from jobs.loadgen.spec import consume_spec, produce_spec
from testing.conf import write_conf_dir

OPTIONS = "type.googleapis.com/uatu.v1.JobOptions"
PRODUCE = {
    "jobGroupId": "load",
    "type": "JOB_TYPE_LOAD_GEN_PRODUCE",
    "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": "load"},
    "extension": {"@type": OPTIONS, "loadgen": {}},
}
CONSUME = {
    "jobGroupId": "measure",
    "type": "JOB_TYPE_LOAD_GEN_CONSUME",
    "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "load"},
    "extension": {"@type": OPTIONS, "loadgen": {}},
}


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    # Port 9 (discard) on loopback: nothing answers, so no test here can reach a broker.
    return write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")


def loadgen(base: dict, **options) -> dict:
    group = copy.deepcopy(base)
    group["extension"]["loadgen"].update(options)
    return group


def changed(base: dict, path: list[str], value) -> dict:
    group = copy.deepcopy(base)
    node = group
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return group


CASES = [
    (changed(PRODUCE, ["flowControl", "messagesPerSec"], -5), "flow_control.messages_per_sec=-5.0"),
    (changed(PRODUCE, ["flowControl", "bytesPerSec"], -1), "flow_control.bytes_per_sec=-1.0"),
    (
        loadgen(PRODUCE, recordSize={"weighted": {"sizes": []}}),
        "extension.loadgen.record_size.weighted.sizes=[]",
    ),
    (
        loadgen(PRODUCE, recordSize={"weighted": {"sizes": [{"bytes": 10, "weight": -1}]}}),
        "extension.loadgen.record_size.weighted.sizes[0].weight=-1.0",
    ),
    (
        loadgen(PRODUCE, recordSize={"weighted": {"sizes": [{"bytes": 10, "weight": 0}]}}),
        "extension.loadgen.record_size.weighted.sizes=[0.0]",
    ),
    (
        loadgen(PRODUCE, recordSize={"weighted": {"sizes": [{"bytes": -3, "weight": 1}]}}),
        "extension.loadgen.record_size.weighted.sizes[0].bytes=-3",
    ),
    (
        loadgen(PRODUCE, recordSize={"fixedBytes": -1}),
        "extension.loadgen.record_size.fixed_bytes=-1",
    ),
    (
        loadgen(PRODUCE, recordSize={"uniform": {"minBytes": 200, "maxBytes": 100}}),
        "extension.loadgen.record_size.uniform.max_bytes=100",
    ),
    (loadgen(PRODUCE, duplicateRatio=1.5), "extension.loadgen.duplicate_ratio=1.5"),
    (loadgen(PRODUCE, duplicateRatio=1), "extension.loadgen.duplicate_ratio=1.0"),
    (loadgen(PRODUCE, duplicateRatio="NaN"), "extension.loadgen.duplicate_ratio=nan"),
    (loadgen(PRODUCE, lateRatio=-0.1), "extension.loadgen.late_ratio=-0.1"),
    (loadgen(PRODUCE, untimedRatio=2), "extension.loadgen.untimed_ratio=2.0"),
    (loadgen(PRODUCE, lateRatio=0.6, untimedRatio=0.5), "extension.loadgen.late_ratio=0.6"),
    (loadgen(PRODUCE, keyCardinality=-1), "extension.loadgen.key_cardinality=-1"),
    (loadgen(PRODUCE, latenessSeconds=-5), "extension.loadgen.lateness_seconds=-5"),
    (loadgen(PRODUCE, totalRecords=-1), "extension.loadgen.total_records=-1"),
    (loadgen(PRODUCE, durationSeconds=-1), "extension.loadgen.duration_seconds=-1"),
    (loadgen(PRODUCE, producerTasks=-2), "extension.loadgen.producer_tasks=-2"),
    (
        loadgen(PRODUCE, json={"eventTimeField": 'a"b'}),
        "extension.loadgen.json.event_time_field='a\"b'",
    ),
    (
        changed(PRODUCE, ["kafkaDispatcherTaskGroup", "topic"], ""),
        "kafka_dispatcher_task_group.topic=''",
    ),
    (
        changed(PRODUCE, ["kafkaDispatcherTaskGroup", "topic"], "orders/../x"),
        "kafka_dispatcher_task_group.topic='orders/../x'",
    ),
    (changed(PRODUCE, ["flowControl", "bytesPerSec"], -5), "flow_control.bytes_per_sec=-5.0"),
    (
        changed(PRODUCE, ["kafkaDispatcherTaskGroup", "cluster"], "nowhere"),
        "kafka_dispatcher_task_group.cluster='nowhere'",
    ),
    (
        changed(PRODUCE, ["extension", "trigger"], {"intervalSeconds": -1}),
        "extension.trigger.interval_seconds=-1",
    ),
    (loadgen(CONSUME, statsWindowSeconds=-10), "extension.loadgen.stats_window_seconds=-10"),
    (
        changed(CONSUME, ["kafkaConsumerTaskGroup", "topic"], ""),
        "kafka_consumer_task_group.topic=''",
    ),
    (changed(CONSUME, ["flowControl", "messagesPerSec"], -1), "flow_control.messages_per_sec=-1.0"),
    (
        changed(CONSUME, ["kafkaConsumerTaskGroup", "endTimestamp"], "2026-01-01T00:00:00Z"),
        "kafka_consumer_task_group.end_timestamp='set': not supported by JOB_TYPE_LOAD_GEN_CONSUME",
    ),
]


@pytest.mark.parametrize(("group", "expected"), CASES, ids=[c[1][:60] for c in CASES])
def test_bad_loadgen_group_exits_2_naming_field_and_value(
    tmp_path, conf_dir, capsys, group, expected
):
    path = tmp_path / "group.json"
    path.write_text(json.dumps(group))
    status = job_main.main([str(path), "--once", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert expected in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "wh").exists() and not (tmp_path / "ck").exists()


def parse(data: dict) -> JobGroup:
    return json_format.ParseDict(data, JobGroup())


def test_produce_defaults(conf_dir):
    spec = produce_spec(parse(PRODUCE), load_settings(conf_dir))
    shape = spec.shape
    assert (shape.size.kind, shape.size.sizes, shape.size.mean) == ("fixed", (100,), 100.0)
    assert shape.key_cardinality == 0
    assert (shape.duplicate_ratio, shape.late_ratio, shape.untimed_ratio) == (0, 0, 0)
    assert shape.lateness_ms == 3_600_000
    assert shape.json_event_time_field is None
    assert spec.acks_all and spec.producer_config()["acks"] == "all"
    assert spec.producer_config()["enable.idempotence"] == "true"
    assert (spec.max_messages_per_sec, spec.max_bytes_per_sec) == (0, 0)
    assert not spec.bounded and spec.trigger_interval_seconds == 10
    assert spec.output.checkpoint.endswith("/ck/load")
    assert spec.required_topic().field == "kafka_dispatcher_task_group.topic"


def test_produce_options_are_read(conf_dir):
    data = loadgen(
        changed(PRODUCE, ["kafkaDispatcherTaskGroup", "isAcksOne"], True),
        recordSize={
            "weighted": {"sizes": [{"bytes": 100, "weight": 3}, {"bytes": 1000, "weight": 1}]}
        },
        keyCardinality=50,
        duplicateRatio=0.1,
        lateRatio=0.2,
        latenessSeconds=90,
        untimedRatio=0.05,
        json={},
        totalRecords=1000,
    )
    spec = produce_spec(parse(data), load_settings(conf_dir))
    assert spec.shape.size.probabilities() == {100: 0.75, 1000: 0.25}
    assert spec.shape.size.mean == 325.0
    assert spec.shape.json_event_time_field == "ts"
    assert spec.shape.lateness_ms == 90_000
    assert spec.producer_config()["acks"] == "1"
    assert spec.bounded and spec.total_records == 1000


def test_consume_defaults(conf_dir):
    spec = consume_spec(parse(CONSUME), load_settings(conf_dir))
    assert spec.window_seconds == 10 and spec.trigger_interval_seconds == 10
    assert spec.output.table("loadgen_stats").endswith("/wh/loadgen_stats")
    assert spec.source.starting_offsets == "earliest" and spec.max_offsets_per_trigger() is None


def test_once_without_a_bound_is_refused_before_spark(conf_dir):
    from jobs.loadgen.job import LoadGenProduceJob

    spec = produce_spec(parse(PRODUCE), load_settings(conf_dir))
    with pytest.raises(InvalidJobGroup) as refused:
        LoadGenProduceJob(spec).run(once=True)
    assert refused.value.exit_status == 2
    assert "extension.loadgen.total_records=0" in str(refused.value)


def test_the_demo_and_bench_workloads_are_valid_bounded_produce_groups(conf_dir):
    """`make run` and `make bench-loadgen` produce their workloads from these files: each must
    pass the checks the job runs, be bounded (they run with --once), and the demo's must write
    the topic the demo audits, with late records older than the hour the demo counts as late."""
    settings = load_settings(conf_dir)
    examples = ROOT / "examples"
    demo = load_jobgroup(examples / "demo-orders-load.json")
    bench = load_jobgroup(examples / "loadgen-bench.json")
    for group in (demo, bench):
        check_common(group, settings.clusters)
        assert produce_spec(group, settings).bounded
    spec = produce_spec(demo, settings)
    audited = load_jobgroup(examples / "audit-demo.json").kafka_consumer_task_group
    assert (spec.cluster.name, spec.topic) == (audited.cluster, audited.topic)
    assert spec.total_records == 3300 and spec.max_messages_per_sec == 1000
    assert spec.shape.json_event_time_field == "ts"
    assert spec.shape.lateness_ms > 3_600_000
    shape = spec.shape
    assert min(shape.duplicate_ratio, shape.late_ratio, shape.untimed_ratio) > 0
