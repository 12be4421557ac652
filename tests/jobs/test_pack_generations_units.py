"""The members a pack takes (jobs/runtime/pack_generations.py `common_key`), without Spark:
one key for all, each topic once. Which specs get which key is each job type's
(test_audit_pack_units.py, test_replication_pack_units.py)."""

from __future__ import annotations

import pytest

from jobs.runtime.pack_generations import Member, common_key


def member(group: str, topic: str, key: str | None = "k") -> Member:
    return Member(group, topic, f"/ck/{group}", from_latest=False, key=key)


def test_members_of_one_key_and_topics_pack_under_that_key():
    assert common_key("a pack", [member("g1", "t1"), member("g2", "t2")]) == "k"


@pytest.mark.parametrize(
    ("members", "refusal"),
    [
        (
            [member("g1", "t1"), member("g2", "t1")],
            r"a pack: each topic once, \['t1'\] listed twice",
        ),
        (
            [member("g1", "t1"), member("g2", "t2", key=None)],
            r"a pack: members that do not pack together: \['g2'\]",
        ),
        (
            [member("g1", "t1"), member("g2", "t2", key="other")],
            r"a pack: members that do not pack together: \['g1', 'g2'\]",
        ),
        ([], "a pack: no members"),
    ],
    ids=["topic-twice", "one-alone", "two-keys", "none"],
)
def test_a_pack_refuses_a_topic_twice_members_of_other_keys_and_none(members, refusal):
    with pytest.raises(ValueError, match=refusal):
        common_key("a pack", members)
