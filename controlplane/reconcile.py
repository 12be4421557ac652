"""Expected vs actual: which command a JobGroup needs (uForwarder's command matrix, §2.4).

Pure: `decide` compares the stored expected state and definition with what runs, and returns
RUN, CANCEL, UPDATE or NONE. `Reconciler` (controlplane/reconciler.py) applies it.

=====================  ==========================  ============================
actual \\ expected      not RUNNING (or deleted)    RUNNING
=====================  ==========================  ============================
nothing alive          NONE                        RUN
alive                  CANCEL                      UPDATE if the definition
                                                   differs, else NONE
=====================  ==========================  ============================
"""

from __future__ import annotations

import enum
import hashlib

from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup


class Action(enum.Enum):
    NONE = "none"
    RUN = "run"
    CANCEL = "cancel"
    UPDATE = "update"


def definition_of(group: JobGroup) -> str:
    """A stable fingerprint of a JobGroup definition (deterministic serialization)."""
    return hashlib.sha256(group.SerializeToString(deterministic=True)).hexdigest()[:16]


def decide(
    expected_state: int | None,
    expected_definition: str | None,
    actual_definition: str | None,
    alive: bool,
) -> Action:
    want_running = expected_state == job_pb2.JOB_STATE_RUNNING
    if want_running and not alive:
        return Action.RUN
    if alive and not want_running:
        return Action.CANCEL
    if want_running and alive and actual_definition != expected_definition:
        return Action.UPDATE
    return Action.NONE
