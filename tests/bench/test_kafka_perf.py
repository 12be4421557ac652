"""bench.kafka_perf's argument builder for a producer run from a payload file (the rest of
kafka_perf is tested in tests/devservices/test_mirror_maker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.kafka_perf import producer_perf_args


def test_producer_args_with_a_payload_file_instead_of_a_record_size() -> None:
    args = producer_perf_args("h:1", "t", 10, None, acks="1", payload_file=Path("/p.txt"))
    assert args[:6] == ["--topic", "t", "--num-records", "10", "--payload-file", "/p.txt"]
    assert "--record-size" not in args
    assert args[-3:] == ["--producer-props", "bootstrap.servers=h:1", "acks=1"]
    with pytest.raises(ValueError):
        producer_perf_args("h:1", "t", 10, 200, payload_file=Path("/p.txt"))
    with pytest.raises(ValueError):
        producer_perf_args("h:1", "t", 10, None)
