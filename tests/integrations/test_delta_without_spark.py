"""delta-rs reads every table the jobs write (Spark-side table features such as deletion
vectors or column mapping would make a table unreadable to other engines), and the query
command runs the docs' example SQL over them."""

from __future__ import annotations

import csv

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from integrations import query
from integrations.report import Warehouse, build_html, totals_of
from integrations.tables import TABLES, find_tables, read
from tests.integrations.conftest import ELSEWHERE

pytestmark = pytest.mark.integration


def test_delta_rs_reads_every_table_the_jobs_write(job_warehouse) -> None:
    tables = find_tables(job_warehouse.warehouse)
    assert set(tables) == set(TABLES) - ELSEWHERE
    for name, path in tables.items():
        table = DeltaTable(path)
        protocol = table.protocol()
        features = set(protocol.reader_features or [])
        assert "columnMapping" not in features and "deletionVectors" not in features, name
        arrow = read(path)
        assert arrow.num_rows == table.count() > 0, name
        assert arrow.column_names == [f.name for f in table.schema().fields], name


def test_audit_counts_read_by_delta_rs_match_what_was_sent(job_warehouse) -> None:
    path = find_tables(job_warehouse.warehouse)["audit_counts"]
    for cluster in ("local", "dest"):  # the source and its copy: two tiers, same counts
        rows = [r for r in read(path).to_pylist() if r["cluster"] == cluster]
        assert sum(r["message_count"] for r in rows) == job_warehouse.sent["total"], cluster
        assert sum(r["duplicate_count"] for r in rows) == job_warehouse.sent["duplicate"], cluster


def test_the_reports_totals_of_the_jobs_tables_are_what_was_sent(job_warehouse) -> None:
    """The report on the jobs' own tables (no verdict table here): per tier, the messages
    and duplicates sent, and a page that builds. The fixture's audit reads no event-time
    field (records are placed by their Kafka timestamp), so none is untimed."""
    totals = totals_of(Warehouse.open(job_warehouse.warehouse)).set_index("cluster")
    sent = job_warehouse.sent
    for cluster in ("local", "dest"):
        row = totals.loc[cluster]
        assert (row["messages"], row["duplicates"], row["untimed"]) == (
            sent["total"], sent["duplicate"], 0,
        ), cluster  # fmt: skip
        assert row["windows_judged"] == 0
    assert 'data-verdict="INCOMPLETE"' in build_html(job_warehouse.warehouse)


def test_the_docs_example_queries_run_without_spark(job_warehouse, tmp_path, capsys) -> None:
    warehouse = str(job_warehouse.warehouse)
    sent = job_warehouse.sent
    per_tier = (
        "SELECT cluster, sum(message_count) AS messages FROM audit_counts "
        "GROUP BY cluster ORDER BY cluster"
    )
    assert query.main(["--warehouse", warehouse, per_tier]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[2:4]] == [
        ["dest", str(sent["total"])],
        ["local", str(sent["total"])],
    ]
    replicated = (
        "SELECT sum(records_read) AS read, sum(records_written) AS written "
        "FROM replication_audit WHERE job_group_id = 'it-orders-dr'"
    )
    out = tmp_path / "copy.csv"
    assert query.main(["--warehouse", warehouse, "--csv", str(out), replicated]) == 0
    with out.open() as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["read"]) == int(row["written"]) == sent["total"]
    groups = (
        'SELECT "group", status, reason FROM consumer_group_status '
        "WHERE \"group\" IN ('it-dr', 'it-idle')"
    )
    parquet = tmp_path / "groups.parquet"
    assert query.main(["--warehouse", warehouse, "--parquet", str(parquet), groups]) == 0
    statuses = {(r["group"], r["status"]) for r in pq.read_table(parquet).to_pylist()}
    assert ("it-idle", "NO_COMMITS") in statuses
    assert any(g == "it-dr" and s not in ("NO_COMMITS", "NOTFOUND") for g, s in statuses)
    assert query.main(["--warehouse", warehouse, "--tables"]) == 0
    assert "consumer_group_status" in capsys.readouterr().out
    assert query.main(["--warehouse", warehouse, "SELECT nope FROM audit_counts"]) == 1
