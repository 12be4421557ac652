"""The completeness report (docs/report.md): one self-contained HTML page from the jobs'
Delta tables, its verdicts read from `audit_verdicts` (`integrations.verdicts`).

    python -m integrations.report --warehouse var/warehouse --out report.html
    make report WAREHOUSE=var/demo/warehouse OUT=report.html

The first screen (grid, totals, gaps) is built in `grid.py`, the page and its charts in
`page.py`; this face names what callers use.
"""

from integrations.report.grid import TimeRange, grid, newest_gaps, totals
from integrations.report.page import (
    MissingWarehouse,
    Warehouse,
    build_html,
    counts_per_tier,
    loss_over_time,
    sections,
    totals_of,
    write_report,
)

__all__ = [
    "MissingWarehouse",
    "TimeRange",
    "Warehouse",
    "build_html",
    "counts_per_tier",
    "grid",
    "loss_over_time",
    "newest_gaps",
    "sections",
    "totals",
    "totals_of",
    "write_report",
]
