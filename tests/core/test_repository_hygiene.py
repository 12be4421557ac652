"""No tracked file names a package registry's host: every client here (pip, mvn, go, apt, npm,
cargo) already has its registry configured, and the repository relies on that default.

The hosts are kept as SHA-256 prefixes so this test does not name them either; a host-like
token in any tracked file is hashed and looked up.
"""

from __future__ import annotations

import hashlib
import re
import subprocess

import pytest

from core.paths import ROOT

# sha256(host)[:16] of the public registries of PyPI, Maven Central (and its mirrors),
# the Go module proxy and checksum database, npm, Debian's archive, Rust's crate index, Apache's and
# Confluent's Maven repositories.
REGISTRY_HOST_HASHES = frozenset(
    {
        "317d2d52829b7812", "43c04ed1dabe979b", "b18b7bf677c9e874", "095fbbaf0076d564",
        "96bf57e26bd82cf0", "a527614f44e77d85", "4f247acdba6480ea", "a2af24d8929473aa",
        "00a7dc5a0cc38858", "9da5f32d96412512", "048e76c14ef34200", "be57af6b78a7faca",
        "a4aa2ac280bb8d1a", "c899567ee9068517", "d6d7019ca9fcbf07", "9495278a74715c7e",
        "0dc11026ac75c015", "70bb4000cd2fab03", "e680c440a2e92079", "1ba4e37997a2e986",
        "c2b35955576ffa71", "26b795f2a123f2a2", "789e46d79514e280", "3d01f3609be82d98",
        "eb7e11c7f9ecbcf4", "30e1d30b5b7da286", "b7bab658d63c0aeb",
    }
)  # fmt: skip

HOST = re.compile(r"\b(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,}\b", re.IGNORECASE)


def registry_hosts_in(text: str) -> set[str]:
    return {
        host
        for host in (m.group(0).lower() for m in HOST.finditer(text))
        if hashlib.sha256(host.encode()).hexdigest()[:16] in REGISTRY_HOST_HASHES
    }


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout: {e}")
    return [name for name in out.decode().split("\0") if name]


def test_the_host_check_recognises_a_registry_host() -> None:
    # Built from parts so that this file names no registry host itself.
    host = ".".join(["proxy", "golang", "org"])
    assert registry_hosts_in(f"GOPROXY=https://{host},direct") == {host}
    assert registry_hosts_in("type.googleapis.com/uatu.v1.JobOptions and 127.0.0.1") == set()


def test_no_tracked_file_names_a_package_registry_host() -> None:
    offenders = {}
    for name in tracked_files():
        try:
            text = (ROOT / name).read_text(errors="replace")
        except (OSError, IsADirectoryError):
            continue
        found = registry_hosts_in(text)
        if found:
            offenders[name] = sorted(found)
    assert offenders == {}, f"registry hosts named in tracked files: {offenders}"
