"""Consumer-group offset translation for failover, from the provenance stamps.

What MirrorMaker 2's checkpoints give its users: a consumer group G that committed offset X on
a source partition should, after failing over to the replica, resume at the destination offset
of the first record copied from source offset X or later. The replication job keeps partition
and order and stamps every copied record with `uatu.src` (see `core/provenance.py`), so, within a
destination partition, the stamped source offsets of one source increase with the destination
offset. The translation is a binary search over the destination partition that reads one
record per probe (O(log n) fetches), skipping records other writers put there.

    python -m jobs.replication.offsets --source-cluster A --topic orders \\
        --dest-cluster B --group billing [--group ...] [--dest-topic orders] [--apply]

prints, per group and partition, the source commit and the destination offset to resume at;
`--apply` commits those offsets to the same group on the destination cluster (the group must
have no active members there, as Kafka's offset reset requires).

When the group is ahead of what was copied (X past the last copied record), the answer is the
destination's end offset: records copied later land at or after it, so nothing is skipped.
A group without a commit on a partition gets no translation for it (it would start from its
`auto.offset.reset` on either side).

Exit codes: 0 translated, 1 Kafka failed (one line naming cluster and topic), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from core.config import ClusterConfig, Settings, load_settings
from core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, UatuError
from core.provenance import SourceOffset, latest_stamp
from jobs.runtime.group_offsets import committed_offsets

log = logging.getLogger("uatu.replication.offsets")

# Reads the destination partition from a destination offset on: the stamp of the first record
# at or after it that the given source wrote, with that record's destination offset; None when
# there is none before the end.
StampReader = Callable[[int], "tuple[int, SourceOffset] | None"]


@dataclass(frozen=True)
class Translation:
    group: str
    partition: int
    source_offset: int
    destination_offset: int


def translate(source_offset: int, low: int, high: int, read_from: StampReader) -> int:
    """The first destination offset in [low, high) whose record came from `source_offset` or
    later, or `high` when no copied record did.

    `read_from(d)` returns the first record of this source at destination offset >= d (its
    destination offset and stamp) or None; stamps increase with destination offsets.
    """
    answer = high
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        found = read_from(mid)
        if found is None:
            hi = mid  # nothing of ours from mid on
            continue
        at, stamp = found
        if stamp.offset >= source_offset:
            answer = min(answer, at)
            hi = mid
        else:
            lo = at + 1
    return answer


class PartitionReader:
    """Reads one destination partition at chosen offsets with a plain assigned consumer."""

    def __init__(
        self, consumer: Consumer, topic: str, partition: int, source: tuple[str, str], high: int
    ) -> None:
        self._consumer, self._topic, self._partition = consumer, topic, partition
        self._source, self._high = source, high
        self.fetches = 0

    def __call__(self, offset: int) -> tuple[int, SourceOffset] | None:
        self._consumer.assign([TopicPartition(self._topic, self._partition, offset)])
        position = offset
        while position < self._high:
            self.fetches += 1
            # One record at a time: consume(n) would wait out its timeout for n records near
            # the end of the partition.
            message = self._consumer.poll(10)
            if message is None:
                raise TranslationFailed(
                    f"destination {self._topic}[{self._partition}]: no record between offset "
                    f"{position} and the end offset {self._high} within 10 s"
                )
            if message.error():
                raise TranslationFailed(
                    f"destination {self._topic}[{self._partition}]: {message.error()}"
                )
            at = message.offset()
            assert at is not None  # a fetched record always has one
            position = at + 1
            headers = message.headers()
            stamp = latest_stamp(list(headers) if isinstance(headers, list) else None)  # type: ignore[arg-type]
            if stamp is not None and (stamp.cluster, stamp.topic) == self._source:
                if stamp.partition != self._partition:
                    raise TranslationFailed(
                        f"destination {self._topic}[{self._partition}] offset {at} came "
                        f"from source partition {stamp.partition}; translation needs a "
                        "partition-preserving copy"
                    )
                return at, stamp
        return None


class TranslationFailed(UatuError):
    """Kafka could not answer what the translation needs (offsets, records, commits)."""

    exit_status = EXIT_FAILED


def translate_group(
    source: tuple[str, ClusterConfig],
    destination: ClusterConfig,
    topic: str,
    dest_topic: str,
    group: str,
) -> list[Translation]:
    """Every committed partition of `group` on the source topic, translated."""
    source_name, source_cluster = source
    commits = committed_offsets(source_cluster, group, topic)
    consumer = Consumer(
        {
            **destination.client_config(),
            "group.id": f"uatu-offset-translation-{group}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        out = []
        for partition, offset in sorted(commits.items()):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(dest_topic, partition), timeout=15
            )
            reader = PartitionReader(consumer, dest_topic, partition, (source_name, topic), high)
            destination_offset = translate(offset, low, high, reader)
            log.info(
                "group %s %s[%d]: source %d -> destination %d (%d fetches)",
                group, topic, partition, offset, destination_offset, reader.fetches,
            )  # fmt: skip
            out.append(Translation(group, partition, offset, destination_offset))
        return out
    finally:
        consumer.close()


def apply(destination: ClusterConfig, dest_topic: str, translations: Sequence[Translation]) -> None:
    """Commit the translated offsets to each group on the destination (the group must be
    empty there)."""
    admin = AdminClient(destination.client_config())
    groups = sorted({t.group for t in translations})
    for group in groups:
        offsets = [
            TopicPartition(dest_topic, t.partition, t.destination_offset)
            for t in translations
            if t.group == group
        ]
        request = [ConsumerGroupTopicPartitions(group, offsets)]
        admin.alter_consumer_group_offsets(request)[group].result(timeout=30)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.replication.offsets",
        description="Translate consumer-group offsets from a source topic to its replica "
        "(by the replication job's provenance stamps), for failover.",
    )
    parser.add_argument("--conf-dir", type=Path, help="site configuration (default: conf/)")
    parser.add_argument("--source-cluster", required=True, help="cluster the group consumed")
    parser.add_argument("--topic", required=True, help="source topic")
    parser.add_argument("--dest-cluster", required=True, help="cluster holding the replica")
    parser.add_argument("--dest-topic", help="replica topic (default: the source topic name)")
    parser.add_argument("--group", action="append", required=True, help="consumer group")
    parser.add_argument(
        "--apply", action="store_true", help="commit the translations to the destination groups"
    )
    return parser


def _cluster(settings: Settings, name: str, field: str) -> ClusterConfig:
    if name not in settings.clusters:
        raise SystemExit(
            f"{field}: unknown cluster {name!r} (clusters.yaml has {sorted(settings.clusters)})"
        )
    return settings.clusters[name]


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = _parser().parse_args(argv)
    settings = load_settings(args.conf_dir)
    try:
        source = _cluster(settings, args.source_cluster, "--source-cluster")
        destination = _cluster(settings, args.dest_cluster, "--dest-cluster")
    except SystemExit as bad:
        print(bad, file=sys.stderr)
        return EXIT_BAD_INPUT
    dest_topic = args.dest_topic or args.topic
    try:
        translations = [
            t
            for group in args.group
            for t in translate_group(
                (args.source_cluster, source), destination, args.topic, dest_topic, group
            )
        ]
        print(f"{'group':<24} {'partition':>9} {'source':>12} {'destination':>12}")
        for t in translations:
            print(
                f"{t.group:<24} {t.partition:>9} {t.source_offset:>12} {t.destination_offset:>12}"
            )
        if args.apply:
            apply(destination, dest_topic, translations)
            print(f"committed to {len(set(t.group for t in translations))} group(s) on "
                  f"{args.dest_cluster}/{dest_topic}")  # fmt: skip
    except Exception as failed:  # a Kafka error of any kind ends the command with one line
        print(f"offset translation {args.source_cluster}/{args.topic} -> "
              f"{args.dest_cluster}/{dest_topic} failed: {failed}", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
