"""The named errors of the suite.

Every error a user can cause with bad input names the offending field and value, so one line
of output is enough to fix it. `exit_status` is what `jobs/main.py` exits with; the control
plane maps the same classes to gRPC status codes in one place.
"""

from __future__ import annotations

# Exit statuses of every job entry point.
EXIT_OK = 0
EXIT_FAILED = 1  # the job started and failed (broker lost, Spark error, ...)
EXIT_BAD_INPUT = 2  # nothing was started: the input or configuration is wrong


class UatuError(Exception):
    """Base of every error raised on purpose by this project."""

    exit_status = EXIT_FAILED


class InvalidJobGroup(UatuError):
    """A JobGroup field has a value the job cannot run with."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"invalid JobGroup: {field}={shown(value)}: {reason}")


MAX_SHOWN_CHARS = 120


def shown(value: object) -> str:
    """repr(value) on one line, at most MAX_SHOWN_CHARS: an error echoes the value, never a
    megabyte of it."""
    text = repr(value)
    if len(text) > MAX_SHOWN_CHARS:
        text = f"{text[:MAX_SHOWN_CHARS]}... ({len(text)} characters)"
    return text


MAX_LINE_CHARS = 300


def first_line(text: str, *, mark_cut: bool = False) -> str:
    """The first non-empty line of `text`, at most MAX_LINE_CHARS: what a status, a CLI and a
    log line show of an error. With `mark_cut`, a line that was cut ends in "..." so a reader
    knows there was more."""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if len(line) <= MAX_LINE_CHARS:
        return line
    return line[:MAX_LINE_CHARS] + ("..." if mark_cut else "")


def error_line(error: BaseException) -> str:
    """An exception as one line: its type and `first_line` of its message."""
    return f"{type(error).__name__}: {first_line(str(error))}"


class UnknownCluster(InvalidJobGroup):
    """A cluster name that conf/clusters.yaml does not define."""

    def __init__(self, field: str, name: str, known: list[str]) -> None:
        super().__init__(field, name, f"unknown cluster; clusters.yaml defines {sorted(known)}")


class TopicNotFound(InvalidJobGroup):
    """The topic does not exist on the cluster (checked before any Spark work)."""

    def __init__(self, field: str, topic: str, cluster: str) -> None:
        super().__init__(field, topic, f"topic does not exist on cluster {cluster!r}")


class ClusterUnreachable(UatuError):
    """The cluster did not answer a metadata request in time. Exit 1, not 2: the input may be
    right and the cluster down for now, so a scheduler may retry (the control plane answers
    UNAVAILABLE)."""

    def __init__(self, cluster: str, bootstrap_servers: str, detail: str) -> None:
        super().__init__(f"cluster {cluster!r} at {bootstrap_servers} did not answer: {detail}")


class ConfigError(UatuError):
    """A file under conf/ is missing or malformed."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"configuration error in {path}: {reason}")


class TableSchemaMismatch(UatuError):
    """An existing Delta table's schema differs from the one its job declares in a way that
    would make the job's writes fail; the job stops before its query starts."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, table: str, path: str, differences: list[str]) -> None:
        self.table = table
        self.path = path
        self.differences = differences
        super().__init__(
            f"Delta table {table} at {path} does not match the schema its job declares: "
            + "; ".join(differences)
        )


class MovedToPack(UatuError):
    """A group whose results went on in a pack (jobs/audit/packs.py, jobs/replication/packs.py)
    was started on its own checkpoint, which would count or copy again what the pack did;
    refused before its query starts. A worker runs such a group alone in a generation of its
    own instead (`alone_spec`)."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, kind: str, job_group_id: str, ledger: str, pack_checkpoint: str) -> None:
        super().__init__(
            f"{kind} group {job_group_id!r} goes on in the pack checkpoint {pack_checkpoint} "
            f"({ledger} says so): its own checkpoint would read those records again; run it "
            f"on a worker, which goes on where the pack left it, or as a {kind} pack (a pack "
            "of one will do)"
        )


class SourceTopicDeleted(UatuError):
    """The source topic was deleted while the job ran; the query failed (exit 1)."""

    def __init__(self, topic: str, cluster: str) -> None:
        super().__init__(
            f"source topic {topic!r} on cluster {cluster!r} no longer exists: it was deleted "
            "while the job ran; nothing of the failed micro-batch was written"
        )


class SourceDataLost(UatuError):
    """Records of the source were deleted (retention, delete-records) before the job read
    them; the query failed rather than count without them (exit 1)."""

    def __init__(self, topic: str, cluster: str, ranges: str, recorded_in: str) -> None:
        self.ranges = ranges
        super().__init__(
            f"records of {cluster}/{topic} were deleted before the job read them "
            f"(partition [from, until) offsets: {ranges}); recorded in {recorded_in}; the job "
            "stops rather than go on without them (to go on past them: --skip-lost-records)"
        )
