"""Prometheus HTTP service discovery of the applications the control plane launched.

Each application or worker the local launcher starts serves its own /metrics on a free port
and names it in a target file, `<apps dir>/metrics-sd/<name>.json`, in file_sd's format
(jobs/runtime/metrics.py writes it on start and removes it on a clean stop). `GET /sd` on the
control plane's metrics port answers with all of them together, which is `http_sd_configs`'s
format too, so Prometheus finds every job without being told about it:

    scrape_configs:
      - job_name: uatu-jobs
        http_sd_configs: [{url: "http://controlplane:9464/sd"}]

A SIGKILLed application leaves its file behind until its next launch replaces it; Prometheus
then shows that target down, which is what it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("uatu.controlplane")

SD_PATH = "/sd"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def sd_groups(sd_dir: Path) -> list[dict[str, Any]]:
    """Every target group of every `*.json` file in `sd_dir` (none when it does not exist
    yet), in file-name order. A file that is not a list of target groups (being replaced,
    hand-edited) is left out with a warning, never the whole answer."""
    groups: list[dict[str, Any]] = []
    for path in sorted(sd_dir.glob("*.json")) if sd_dir.is_dir() else []:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            log.warning("service discovery: %s skipped: %s", path, e)
            continue
        if not isinstance(found, list) or not all(_is_group(g) for g in found):
            log.warning("service discovery: %s skipped: not a list of target groups", path)
            continue
        groups.extend(found)
    return groups


def _is_group(group: object) -> bool:
    return (
        isinstance(group, dict)
        and isinstance(group.get("targets"), list)
        and isinstance(group.get("labels", {}), dict)
    )


def with_sd(metrics_app: WsgiApp, sd_dir: Path) -> WsgiApp:
    """`metrics_app` (prometheus_client's /metrics), plus `GET /sd` answering `sd_groups`."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != SD_PATH:
            return metrics_app(environ, start_response)
        body = json.dumps(sd_groups(sd_dir)).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response("200 OK", headers)
        return [body]

    return app
