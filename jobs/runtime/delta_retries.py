"""Writes that meet another writer's commit, retried: the bounded retry every Delta write of
the jobs (and the tables' upkeep) goes through (`jobs/runtime/delta.py`).

Delta commits optimistically: a write that finds another writer's commit in its way fails
with a concurrent-modification error and has committed nothing, so it may simply run again.
A write that carries an idempotent-write marker stays exactly-once however often it runs.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from delta import exceptions as delta_errors

log = logging.getLogger("uatu.delta")

# Attempts of one write (or one creation) that meets another writer's commit.
WRITE_ATTEMPTS = 6
# The first retry's pause; each next one doubles it, with jitter so writers that met do not
# meet again.
RETRY_PAUSE_SECONDS = 0.5

_T = TypeVar("_T")


# Delta's Python classes of its concurrent modification errors share no base of their own.
_CONCURRENT_MODIFICATION = (
    delta_errors.DeltaConcurrentModificationException,
    delta_errors.ConcurrentWriteException,
    delta_errors.MetadataChangedException,
    delta_errors.ProtocolChangedException,
    delta_errors.ConcurrentAppendException,
    delta_errors.ConcurrentDeleteReadException,
    delta_errors.ConcurrentDeleteDeleteException,
    delta_errors.ConcurrentTransactionException,
)


def conflicting(error: Exception) -> bool:
    """Whether `error` is another writer's commit meeting this one: Delta's concurrent
    modification exceptions, a creation that found the table created meanwhile, and a write
    that found no table where another writer's creation was under way (named by its error
    class, whatever Python class carries it)."""
    if isinstance(error, _CONCURRENT_MODIFICATION):
        return True
    text = str(error)
    return any(f"[{name}]" in text for name in _MET_A_CREATION)


# Error classes of a table being created by another writer at the same moment.
_MET_A_CREATION = (
    "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION",
    "DELTA_TABLE_ALREADY_EXISTS",
    "DELTA_TABLE_NOT_FOUND",
)


def with_retries(what: str, attempt: Callable[[], _T]) -> _T:
    """`attempt()`, again after a pause when it met another writer (`conflicting`), at most
    WRITE_ATTEMPTS times; any other error, or the last conflict, is raised as it is."""
    for number in range(1, WRITE_ATTEMPTS + 1):
        try:
            return attempt()
        except Exception as error:
            if number == WRITE_ATTEMPTS or not conflicting(error):
                raise
            pause = RETRY_PAUSE_SECONDS * 2 ** (number - 1) * random.uniform(0.5, 1.5)
            log.warning(
                "%s met another writer (%s); attempt %d of %d in %.1f s",
                what,
                type(error).__name__,
                number + 1,
                WRITE_ATTEMPTS,
                pause,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises
