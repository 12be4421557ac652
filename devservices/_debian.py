"""Programs taken from Debian packages and unpacked into the repo, not installed system-wide.

Used by ``devservices.etcd install`` (``etcd-server``) and ``devservices.burrow install``
(``burrow``)::

    install_from_deb("etcd-server", "usr/bin/etcd", Path("var/etcd/bin/etcd"))

``apt-get download`` needs no root and leaves the system untouched; ``dpkg-deb -x`` unpacks
the .deb into a temporary directory and the one file wanted is copied out of it.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger("uatu.debian")

APT_TIMEOUT_S = 300.0


class DebPackageError(RuntimeError):
    """The package could not be downloaded or unpacked, or it lacks the file asked for."""


def install_from_deb(package: str, member: str, target: Path) -> Path:
    """Put the file ``member`` of Debian's ``package`` at ``target`` unless it is already there.

    ``member`` is the file's path inside the package, e.g. ``usr/bin/etcd``. ``apt-get update``
    runs only if the first download fails, since stale package lists are the usual reason.
    The file is copied under a temporary name and renamed, so an interrupted install never
    looks installed. Returns ``target``.
    """
    if target.exists():
        return target
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise DebPackageError(
                f"{tool} not found: put /{member} from {package} at {target} by hand"
            )
    with tempfile.TemporaryDirectory(prefix=f"{package}-deb-") as tmp:
        work = Path(tmp)
        # apt drops privileges to _apt for downloads; a private temp dir would make it warn.
        work.chmod(0o755)
        if not _run(["apt-get", "download", package], work):
            log.info("apt-get download failed; running apt-get update and retrying")
            _run(["apt-get", "update"], work, check=True)
            _run(["apt-get", "download", package], work, check=True)
        debs = sorted(work.glob(f"{package}_*.deb"))
        if not debs:
            raise DebPackageError(f"apt-get download left no {package}_*.deb in {work}")
        unpacked = work / "root"
        _run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], work, check=True)
        found = unpacked / member
        if not found.is_file():
            raise DebPackageError(f"{debs[0].name} has no /{member}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy(found, partial)
        partial.chmod(0o755)
        partial.replace(target)
        log.info("installed %s from %s", target, debs[0].name)
    return target


def _run(cmd: list[str], cwd: Path, check: bool = False) -> bool:
    log.info("running %s", " ".join(cmd))
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise DebPackageError(f"{' '.join(cmd)} took more than {APT_TIMEOUT_S:.0f} s") from e
    if proc.returncode != 0 and check:
        raise DebPackageError(
            f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr.strip()}"
        )
    return proc.returncode == 0
