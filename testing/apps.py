"""Finding the Spark applications a test launched, by what is really running on this host."""

from __future__ import annotations

import os
from pathlib import Path


def spark_submit_groups(marker: str) -> set[int]:
    """Process groups of live `spark-submit` processes whose command line contains `marker`
    (a JobGroup file or an app folder of the test)."""
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        state = stat.rsplit(")", 1)[-1].split()[0]
        text = b" ".join(argv).decode(errors="replace")
        if state != "Z" and "spark-submit" in text and marker in text:
            try:
                groups.add(os.getpgid(int(entry.name)))
            except ProcessLookupError:
                continue
    return groups
