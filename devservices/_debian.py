"""Programs taken from Debian packages and unpacked into the repo, not installed system-wide.

Used by ``devservices.etcd install`` (``etcd-server``), ``devservices.burrow install``
(``burrow``) and ``devservices.prometheus install`` (``prometheus``: the server and promtool)::

    install_from_deb("etcd-server", "usr/bin/etcd", Path("var/etcd/bin/etcd"))

``apt-get download`` needs no root and leaves the system untouched; ``dpkg-deb -x`` unpacks
the .deb into a temporary directory and the files wanted are copied out of it.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("uatu.debian")

APT_TIMEOUT_S = 300.0


class DebPackageError(RuntimeError):
    """The package could not be downloaded or unpacked, or it lacks the file asked for."""


def install_from_deb(package: str, member: str, target: Path) -> Path:
    """Put the file ``member`` of Debian's ``package`` at ``target`` unless it is already there.

    ``member`` is the file's path inside the package, e.g. ``usr/bin/etcd``. Returns
    ``target``. See `install_files_from_deb`."""
    install_files_from_deb(package, {member: target})
    return target


def install_files_from_deb(package: str, members: Mapping[str, Path]) -> None:
    """Put each file ``member`` of Debian's ``package`` at its target, with one download, unless
    every target is already there.

    ``apt-get update`` runs only if the first download fails, since stale package lists are
    the usual reason. Each file is copied under a temporary name and renamed, so an
    interrupted install never looks installed.
    """
    if all(target.exists() for target in members.values()):
        return
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            wanted = ", ".join(f"/{m}" for m in members)
            raise DebPackageError(f"{tool} not found: put {wanted} from {package} by hand")
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
        for member, target in members.items():
            found = unpacked / member
            if not found.is_file():
                raise DebPackageError(f"{debs[0].name} has no /{member}")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            shutil.copy(found, partial)
            partial.chmod(0o755)
            partial.replace(target)
            log.info("installed %s from %s", target, debs[0].name)


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


# --- a program with the shared libraries the system lacks ------------------------------------
#
# Chromium needs about twenty libraries a server image does not have (audio, codecs, fonts'
# shaping). `dpkg-deb -x` of the program alone leaves them missing, and installing them
# system-wide is what this module avoids. The nearest working approach: resolve the package's
# dependencies the way apt would (first alternative of each `A | B`, skipping what dpkg says is
# installed), unpack every missing one into the same private root, and run the program with
# LD_LIBRARY_PATH naming that root's library folders (`library_path`).


def missing_dependencies(package: str) -> list[str]:
    """`package` and, recursively, every dependency of it that is not installed (sorted).

    A dependency group `A | B` counts as met when any alternative is installed or virtual;
    otherwise its first alternative is taken, as apt would.
    """
    wanted, seen = [package], set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        for alternatives in _dependency_groups(name):
            if any(a.startswith("<") or _installed(a) for a in alternatives):
                continue
            wanted.append(alternatives[0])
    return sorted(seen)


def install_tree_from_debs(packages: list[str], root: Path, marker: str) -> Path:
    """Unpack every .deb of `packages` into `root` (unless `root/marker` exists); return root.

    The tree is built beside `root` and renamed into place, so an interrupted install never
    looks installed.
    """
    if (root / marker).exists():
        return root
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise DebPackageError(f"{tool} not found: unpack {packages} into {root} by hand")
    with tempfile.TemporaryDirectory(prefix="debs-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        if not _run(["apt-get", "download", *packages], work):
            log.info("apt-get download failed; running apt-get update and retrying")
            _run(["apt-get", "update"], work, check=True)
            _run(["apt-get", "download", *packages], work, check=True)
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for deb in sorted(work.glob("*.deb")):
            _run(["dpkg-deb", "-x", str(deb), str(partial)], work, check=True)
        if not (partial / marker).exists():
            raise DebPackageError(f"{packages[0]} has no /{marker}")
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        partial.replace(root)
    log.info("unpacked %d packages into %s", len(packages), root)
    return root


def library_path(root: Path) -> str:
    """LD_LIBRARY_PATH value: every folder under `root` that holds a shared library."""
    folders = sorted({str(p.parent) for p in root.rglob("*.so*") if p.is_file()})
    return ":".join(folders)


def _installed(package: str) -> bool:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.stdout.strip() == "install ok installed"


_APT_DEPENDS = (
    "apt-cache",
    "depends",
    "--no-recommends",
    "--no-suggests",
    "--no-conflicts",
    "--no-breaks",
    "--no-replaces",
    "--no-enhances",
)


def _dependency_groups(package: str) -> list[list[str]]:
    """`apt-cache depends` of one package: its Depends/PreDepends groups of alternatives."""
    done = subprocess.run(
        [*_APT_DEPENDS, package],
        capture_output=True,
        text=True,
        check=False,
        timeout=APT_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise DebPackageError(f"apt-cache depends {package} failed: {done.stderr.strip()}")
    groups: list[list[str]] = []
    current: list[str] = []
    for line in done.stdout.splitlines()[1:]:
        kind, _, name = line.strip().partition(":")
        if kind.lstrip("|") not in ("Depends", "PreDepends"):
            continue
        current.append(name.strip())
        if not kind.startswith("|"):  # "|Depends:" means: or the next one
            groups.append(current)
            current = []
    return groups
