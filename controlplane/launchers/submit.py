"""The `spark-submit.sh` command line for a stored JobGroup (pure, no shell involved), and
the per-application folder the file-based launchers (local, standalone) share.

The control plane writes the group's JobGroup JSON to a file and runs exactly what a
scheduler would run: `spark-submit.sh <file> [--once]`, with the site configuration passed
through the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.paths import SPARK_SUBMIT_SCRIPT


@dataclass(frozen=True)
class AppFiles:
    """What a launched application reads from its folder: its JobGroup and its stop file."""

    jobgroup_file: Path
    stop_file: Path


def prepare_app_dir(app_dir: Path, group: JobGroup | None) -> AppFiles:
    """Write the group's JobGroup JSON into `app_dir` (none for a worker application) and
    clear a stale stop file."""
    app_dir.mkdir(parents=True, exist_ok=True)
    files = AppFiles(app_dir / "jobgroup.json", app_dir / "stop")
    if group is not None:
        files.jobgroup_file.write_text(json_format.MessageToJson(group, indent=2))
    files.stop_file.unlink(missing_ok=True)
    return files


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: Mapping[str, str]


def build_launch(
    jobgroup_file: Path,
    *,
    once: bool = False,
    conf_dir: Path | None = None,
    spark_master: str | None = None,
    driver_memory: str | None = None,
    stop_file: Path | None = None,
    metrics_sd_dir: Path | None = None,
    metrics_host: str = "127.0.0.1",
    script: Path = SPARK_SUBMIT_SCRIPT,
) -> Launch:
    """argv and extra environment for one Spark application of one JobGroup."""
    argv = [str(script), str(jobgroup_file)]
    if once:
        argv.append("--once")
    env = _site_env(conf_dir, spark_master, driver_memory, stop_file, metrics_sd_dir, metrics_host)
    return Launch(argv=argv, env=env)


def build_worker_launch(
    *,
    conf_dir: Path | None = None,
    spark_master: str | None = None,
    driver_memory: str | None = None,
    stop_file: Path | None = None,
    metrics_sd_dir: Path | None = None,
    metrics_host: str = "127.0.0.1",
    script: Path = SPARK_SUBMIT_SCRIPT,
) -> Launch:
    """argv and extra environment for one worker application (`spark-submit.sh worker`)."""
    argv = [str(script), "worker"]
    env = _site_env(conf_dir, spark_master, driver_memory, stop_file, metrics_sd_dir, metrics_host)
    return Launch(argv=argv, env=env)


def metrics_sd_dir(workdir: Path) -> Path:
    """Where the applications a launcher starts in `workdir` name their /metrics endpoints
    (one target file each), which the control plane serves as Prometheus HTTP service
    discovery (controlplane/http_sd.py)."""
    return workdir / "metrics-sd"


def metrics_env(sd_dir: Path, host: str) -> dict[str, str]:
    """The environment that makes an application serve /metrics on a free port of the
    interface `host` and name it in a target file in `sd_dir` (jobs/runtime/metrics.py)."""
    return {
        "UATU_METRICS_PORT": "0",
        "UATU_METRICS_HOST": host,
        "UATU_METRICS_SD_DIR": str(sd_dir),
    }


def _site_env(
    conf_dir: Path | None,
    spark_master: str | None,
    driver_memory: str | None,
    stop_file: Path | None,
    metrics_sd_dir: Path | None,
    metrics_host: str,
) -> dict[str, str]:
    """With `metrics_sd_dir`, the application serves /metrics on a port of its own, on the
    interface `metrics_host`, and names it in a target file there (jobs/runtime/metrics.py),
    for the control plane's /sd."""
    env = {}
    if conf_dir is not None:
        env["UATU_CONF_DIR"] = str(conf_dir)
    if spark_master:
        env["SPARK_MASTER"] = spark_master
    if driver_memory:
        env["UATU_DRIVER_MEMORY"] = driver_memory
    if stop_file is not None:
        env["UATU_STOP_FILE"] = str(stop_file)
    if metrics_sd_dir is not None:
        env.update(metrics_env(metrics_sd_dir, metrics_host))
    return env
