"""Site configuration folders for tests, benches and the demo."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml


def write_conf_dir(
    path: Path,
    bootstrap_servers: str,
    warehouse: Path,
    checkpoints: Path,
    *,
    more_clusters: Mapping[str, Mapping[str, object]] | None = None,
) -> Path:
    """Write a conf folder whose `local` cluster is `bootstrap_servers` (demo, tests, bench).

    `more_clusters` adds named clusters, each a clusters.yaml entry (bootstrap_servers, ...).
    """
    path.mkdir(parents=True, exist_ok=True)
    (path / "uatu.yaml").write_text(
        yaml.safe_dump({"warehouse": str(warehouse), "checkpoints": str(checkpoints)})
    )
    clusters: dict[str, dict] = {"local": {"bootstrap_servers": bootstrap_servers}}
    clusters.update({name: dict(entry) for name, entry in (more_clusters or {}).items()})
    (path / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    return path
