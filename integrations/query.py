"""`python -m integrations.query`: SQL over the jobs' Delta tables, without Spark.

    python -m integrations.query --warehouse var/warehouse "SELECT topic, sum(message_count)
        FROM audit_counts GROUP BY topic"
    python -m integrations.query --warehouse W --csv out.csv "SELECT ..."
    python -m integrations.query --warehouse W --parquet out.parquet "SELECT ..."
    python -m integrations.query --warehouse W --tables      # what is there, rows and version

Every table present under the warehouse is registered under its name (`audit_counts`,
`replication_audit`, ...; `--table NAME=PATH` adds others) and the SQL runs in delta-rs's
DataFusion engine (`deltalake.QueryBuilder`): no JVM, no DuckDB extension download. The SQL
dialect is DataFusion's (PostgreSQL-like): `date_trunc('hour', window_start)`, `now()`,
`INTERVAL '1 day'`; Spark's sketch functions (`hll_sketch_estimate`, `kll_*`) are not there, the
`*_p50/p95/p99` columns are.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pa_parquet
from deltalake import DeltaTable, QueryBuilder

from integrations.tables import find_tables

BINARY_SHOWN = 12  # bytes of a sketch column shown before "…"


def run_sql(sql: str, tables: Mapping[str, str]) -> pa.Table:
    """Run `sql` with each of `tables` (name -> Delta path) registered under its name."""
    builder = QueryBuilder()
    for name, path in tables.items():
        builder = builder.register(name, DeltaTable(path))
    batches = builder.execute(sql)
    return pa.table(batches.read_all())


def format_table(table: pa.Table, limit: int = 200) -> str:
    """A plain-text grid of the first `limit` rows (binary columns abbreviated)."""
    names = table.column_names
    shown = table.slice(0, limit).to_pylist()
    cells = [[_cell(row[n]) for n in names] for row in shown]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    line = "  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    if table.num_rows > limit:
        out.append(f"... {table.num_rows - limit} more rows")
    out.append(f"({table.num_rows} rows)")
    return "\n".join(out)


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value[:BINARY_SHOWN].hex() + ("…" if len(value) > BINARY_SHOWN else "")
    return str(value)


def table_summary(tables: Mapping[str, str]) -> pa.Table:
    """Name, path, Delta version, rows, reader/writer protocol of each table."""
    rows = []
    for name, path in sorted(tables.items()):
        table = DeltaTable(path)
        protocol = table.protocol()
        rows.append(
            {
                "table": name,
                "version": table.version(),
                "rows": table.count(),
                "reader_version": protocol.min_reader_version,
                "writer_version": protocol.min_writer_version,
                "path": path,
            }
        )
    return pa.Table.from_pylist(rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m integrations.query", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("sql", nargs="?", help="the SQL to run (DataFusion dialect)")
    parser.add_argument("--warehouse", type=Path, default=Path("var/warehouse"))
    parser.add_argument(
        "--table", action="append", default=[], metavar="NAME=PATH", help="register another table"
    )
    parser.add_argument("--tables", action="store_true", help="list the tables and exit")
    parser.add_argument("--csv", type=Path, help="write the result as CSV instead of printing")
    parser.add_argument("--parquet", type=Path, help="write the result as Parquet")
    parser.add_argument("--limit", type=int, default=200, help="rows printed (default 200)")
    args = parser.parse_args(argv)
    if not args.tables and not args.sql:
        parser.error("give the SQL to run, or --tables")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tables = find_tables(args.warehouse)
    for entry in args.table:
        name, _, path = entry.partition("=")
        if not name or not path:
            print(f"error: --table {entry!r} is not NAME=PATH", file=sys.stderr)
            return 2
        tables[name] = path
    if not tables:
        print(f"error: no Delta tables under {args.warehouse}", file=sys.stderr)
        return 2
    if args.tables:
        print(format_table(table_summary(tables)))
        return 0
    try:
        result = run_sql(args.sql, tables)
    except Exception as e:  # DataFusion's planning and execution errors have no common type
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.csv:
        pa_csv.write_csv(_printable(result), args.csv)
        print(f"wrote {result.num_rows} rows to {args.csv}")
    elif args.parquet:
        pa_parquet.write_table(result, args.parquet)
        print(f"wrote {result.num_rows} rows to {args.parquet}")
    else:
        print(format_table(result, args.limit))
    return 0


def _printable(table: pa.Table) -> pa.Table:
    """CSV has no binary, list or struct columns: hex and JSON-ish strings instead."""
    columns = []
    for column in table.columns:
        kind = column.type
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            column = pa.array([None if v is None else v.hex() for v in column.to_pylist()])
        elif pa.types.is_nested(kind):
            column = pa.array([None if v is None else str(v) for v in column.to_pylist()])
        columns.append(column)
    return pa.table(columns, names=table.column_names)


if __name__ == "__main__":
    sys.exit(main())
