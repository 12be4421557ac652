"""The local launcher: each JobGroup's `spark-submit.sh` as a process group on this host.

`LocalLauncher` (the `Launcher` contract of launchers/base.py) runs `spark-submit.sh`
(client mode) in its own process group. Cancel is graceful first: the stop file plus SIGTERM
to the script make the job stop its query and exit 0; whatever is still alive after the
grace period gets SIGKILL on the whole group.
Its launch records carry the pid (= process group id), the pid's start time and the stop
file, so a restarted control plane adopts running applications instead of starting them
twice, and never mistakes a reused pid for its application.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.errors import LaunchFailed
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.submit import (
    Launch,
    build_launch,
    build_worker_launch,
    metrics_sd_dir,
    prepare_app_dir,
)
from core import faults
from core.processes import group_pids, pid_alive, signal_group, signal_pid, start_ticks

log = logging.getLogger("uatu.launcher")


def _inherited(environ: Mapping[str, str]) -> dict[str, str]:
    """What an application inherits from the control plane's environment: all of it but the
    fault hook's variable (a drill of the control plane's own steps is not the application's;
    an application's drill comes through the launch's env)."""
    return {k: v for k, v in environ.items() if k != faults.ENV}


# How long a cancel waits for an application to be gone after SIGKILL before it fails (and
# the reconciler tries again on its next pass, relaunching nothing meanwhile).
KILLED_EXIT_SECONDS = 30.0


class LocalLauncher:
    def __init__(
        self,
        workdir: Path,
        *,
        conf_dir: Path | None = None,
        spark_master: str | None = None,
        grace_seconds: float = 10.0,
        host: str | None = None,
        metrics_host: str | None = None,
    ) -> None:
        """`metrics_host`: the interface the applications serve /metrics on, named for the
        control plane's /sd (`serve --metrics-address`'s host); None: they serve none."""
        self.workdir = workdir
        self.metrics_host = metrics_host
        self.conf_dir = conf_dir
        self.spark_master = spark_master
        self.grace_seconds = grace_seconds
        self.host = host or socket.gethostname()
        # Children started by this process; polling them reaps exited ones (no zombies).
        self._children: dict[int, subprocess.Popen] = {}

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        app_dir = self.workdir / group.job_group_id
        files = prepare_app_dir(app_dir, group)
        launch = build_launch(
            files.jobgroup_file, conf_dir=self.conf_dir, spark_master=self.spark_master,
            stop_file=files.stop_file, **self._metrics(),
        )  # fmt: skip
        return self._start(group.job_group_id, app_dir, launch, files.stop_file, definition, env)

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """Start a worker application (`spark-submit.sh worker`) named `name`."""
        app_dir = self.workdir / name
        files = prepare_app_dir(app_dir, None)
        launch = build_worker_launch(
            conf_dir=self.conf_dir,
            spark_master=self.spark_master,
            stop_file=files.stop_file,
            **self._metrics(),
        )
        return self._start(name, app_dir, launch, files.stop_file, definition, env)

    def _metrics(self) -> dict[str, Any]:
        if self.metrics_host is None:
            return {}
        return {"metrics_sd_dir": metrics_sd_dir(self.workdir), "metrics_host": self.metrics_host}

    def _start(
        self,
        name: str,
        app_dir: Path,
        launch: Launch,
        stop_file: Path,
        definition: str,
        env: Mapping[str, str],
    ) -> LaunchRecord:
        with (app_dir / "app.log").open("ab") as out:
            proc = subprocess.Popen(
                launch.argv,
                env={**_inherited(os.environ), **launch.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: cancel reaches the JVM and Python
            )
        self._children[proc.pid] = proc
        log.info("launched %s: pid %d, log %s", name, proc.pid, app_dir / "app.log")
        return LaunchRecord(
            handle=str(proc.pid),
            definition=definition,
            started_at=time.time(),
            log=str(app_dir / "app.log"),
            details=launch_details(
                pid=proc.pid,
                pid_start=start_ticks(proc.pid),
                stop_file=str(stop_file),
                host=self.host,
            ),
        )

    def observes(self, record: LaunchRecord) -> bool:
        # A pid means something only on the host that started it; records from before the
        # host was recorded were all written by a single-host control plane.
        return record.details.get("host", self.host) == self.host

    def alive(self, record: LaunchRecord) -> bool:
        pid = int(record.detail("pid"))
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        # Adopted from an earlier control plane: the pid must still be the same process, or a
        # reused pid would be taken for the application (and cancelled with its group).
        recorded = record.details.get("pid_start")
        return pid_alive(pid) and (recorded is None or start_ticks(pid) == recorded)

    def cancel(self, record: LaunchRecord) -> None:
        pid = int(record.detail("pid"))
        Path(str(record.detail("stop_file"))).touch()
        signal_pid(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        while self.alive(record) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.alive(record):
            log.warning("pid %d still alive after %.0f s; SIGKILL", pid, self.grace_seconds)
        # The group may hold the JVM and Python driver even after the script itself exited.
        signal_group(pid, signal.SIGKILL)
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait(timeout=30)
        # Return only once every process of it is gone, so its relaunch never runs beside it:
        # a process dies some time after SIGKILL (a JVM gives back gigabytes first), and one
        # adopted from an earlier control plane is no child to wait for.
        # The group's live members include its leader while that lives.
        deadline = time.monotonic() + KILLED_EXIT_SECONDS
        while (left := group_pids(pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if left:
            detail = f"pids {left} alive {KILLED_EXIT_SECONDS:g} s after SIGKILL; no relaunch yet"
            raise LaunchFailed("cancel", record.handle, detail)
