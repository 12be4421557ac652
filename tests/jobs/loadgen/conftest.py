"""Helpers of the load generator tests: JobGroups, in-process runs, the `loadgen` header read
independently of the job's code (its documented layout)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from testing.conf import write_conf_dir

HEADER = "loadgen"


@pytest.fixture
def conf_dir(tmp_path: Path, kafka) -> Path:
    return write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )


def produce_group(
    group_id: str, topic: str, *, flow: dict | None = None, acks_one: bool = False, **loadgen: Any
) -> dict:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_LOAD_GEN_PRODUCE",
        "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": topic, "isAcksOne": acks_one},
        "flowControl": dict(flow or {}),
        "extension": {"@type": "type.googleapis.com/uatu.v1.JobOptions", "loadgen": loadgen},
    }


def consume_group(group_id: str, topic: str, **loadgen: Any) -> dict:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_LOAD_GEN_CONSUME",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "consumerGroup": f"{group_id}-cg",
        },
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            "loadgen": loadgen,
        },
    }


def run_once(data: dict, conf_dir: Path) -> int:
    """Run the group's job in this process (the test session's Spark) as with --once."""
    from jobs import registry

    group = json_format.ParseDict(data, JobGroup())
    job_type, spec = registry.validate(group, load_settings(conf_dir))
    return job_type.load_runtime()(spec).run(once=True)


def encode_header(seq: int, send_us: int, generator: str) -> bytes:
    return struct.pack(">qq", seq, send_us) + generator.encode()


def decode_header(headers) -> tuple[int, int, str] | None:
    """(seq, send time in epoch µs, generator) of a record's `loadgen` header, or None."""
    for name, value in headers or ():
        if name == HEADER and value is not None and len(value) >= 16:
            seq, send_us = struct.unpack(">qq", value[:16])
            return seq, send_us, value[16:].decode()
    return None
