"""A replication of many topics (`extension.topics`), its pure rules: how each copy is named,
which source topics are copies themselves and are never copied back (no cycles), and which
topic configs a copy gets. No broker, no Spark; `preflight.py` and `job.py` apply them.

Naming (`extension.replication.topic_naming`), as MirrorMaker 2's replication policies:

* TOPIC_NAMING_IDENTITY: a copy keeps its source topic's name (IdentityReplicationPolicy);
* TOPIC_NAMING_SOURCE_PREFIX: `<source_alias>.<topic>` (DefaultReplicationPolicy), the alias
  being `extension.replication.source_alias`, by default the source cluster's name.

Cycles: a source topic whose name is `<alias>.<anything>`, for the job's own alias or the name
of any cluster in conf/clusters.yaml (the aliases another replication may have used), is a
copy and is never selected. MirrorMaker 2 reads the same prefix (`topicSource`) to stop a
record from going round A -> B -> A. The identity naming carries no such mark, so a selection
that copies a cluster onto itself with it is refused (every topic would be its own copy).

Config sync: what MirrorMaker 2 does with its defaults (`sync.topic.configs.enabled`,
`use.defaults.from=target`, `config.properties.exclude`): every config the source topic sets
itself (not the source broker's value nor the default, which the destination has its own of)
is set on the new destination topic, except the replication and placement settings of
EXCLUDED_CONFIGS, which are the destination's own too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SEPARATOR = "."  # MirrorMaker 2's replication.policy.separator default

# MirrorMaker 2's DefaultConfigPropertyFilter default (config.properties.exclude), plus the
# timestamp bounds that replaced message.timestamp.difference.max.ms.
EXCLUDED_CONFIGS = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    }
)


@dataclass(frozen=True)
class TopicNaming:
    """How a source topic's copy is named: `<prefix>.<topic>`, or the topic's own name when
    `prefix` is empty (identity)."""

    prefix: str = ""

    def destination(self, topic: str) -> str:
        return f"{self.prefix}{SEPARATOR}{topic}" if self.prefix else topic

    def __str__(self) -> str:
        return f"<topic> -> {self.destination('<topic>')}"


def copied_from(topic: str, aliases: Iterable[str]) -> str | None:
    """The alias `topic` is named as a copy from (MirrorMaker 2's `topicSource`: the part
    before the first separator), or None when it is no copy of any of `aliases`."""
    head, separator, rest = topic.partition(SEPARATOR)
    return head if separator and rest and head in set(aliases) else None


def copies_pattern(aliases: Iterable[str]) -> str:
    """A regular expression matching the whole name of every copy of `aliases`, in a syntax
    Java (Spark's subscribePattern) and Python read alike; "" when there is no alias."""
    names = sorted({a for a in aliases if a})
    if not names:
        return ""
    return f"(?:{'|'.join(re.escape(a) for a in names)}){re.escape(SEPARATOR)}.+"


def synced_configs(source: Mapping[str, tuple[str | None, bool]]) -> dict[str, str]:
    """The configs a new destination topic gets from its source topic's configs
    (name -> (value, set by the topic itself), `core.kafka_admin.topic_configs`): every one
    the topic sets, except EXCLUDED_CONFIGS."""
    return {
        name: value
        for name, (value, set_here) in sorted(source.items())
        if set_here and value is not None and name not in EXCLUDED_CONFIGS
    }
