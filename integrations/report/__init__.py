"""The completeness report (docs/report.md): one self-contained HTML page from the jobs'
Delta tables, its verdicts read from `audit_verdicts` (`integrations.verdicts`).

    python -m integrations.report --warehouse var/warehouse --out report.html
    make report WAREHOUSE=var/demo/warehouse OUT=report.html

The code is in `page.py`; this face names what callers use.
"""

from integrations.report.page import (
    build_html,
    charts,
    counts_per_tier,
    loss_over_time,
    window_verdicts,
    write_report,
)

__all__ = [
    "build_html",
    "charts",
    "counts_per_tier",
    "loss_over_time",
    "window_verdicts",
    "write_report",
]
