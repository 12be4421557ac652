"""Where a job may write: tables under the warehouse root, checkpoints under the checkpoint
root, both from conf/uatu.yaml. The site decides the roots; a JobGroup only picks a place
under them (`extension.output.*_path`).

`table_location(field, requested, root, default_name)` and
`checkpoint_location(field, requested, root, job_group_id)` return the location to use, or
raise InvalidJobGroup naming the field when `requested`:

* uses a scheme outside ALLOWED_SCHEMES, or another scheme or host (bucket, namenode) than
  the root's: no outbound connection to a host the caller picks;
* is not strictly under the root once normalised (``..``, ``//``, symlinks of a local path
  resolved): no file written anywhere the service user can write;
* holds characters a path has no business holding (control characters, ``%``, ``\\``).

A relative `requested` is taken relative to the root. A checkpoint must moreover lie in the
group's own folder, ``<checkpoints>/<job_group_id>`` (the default) or below it: job group ids
are unique, so no two groups can ever share a checkpoint, which would break exactly-once for
both. The same rules run in `spark-submit.sh --check` (through the job specs) and in the
control plane.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import NamedTuple

from core.errors import InvalidJobGroup

ALLOWED_SCHEMES = ("file", "hdfs", "s3a", "abfss", "gs")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f%\\]")


class Location(NamedTuple):
    scheme: str  # "" for a plain local path
    authority: str  # host or bucket; "" for local paths
    path: str  # absolute, normalised

    def render(self) -> str:
        if not self.scheme:
            return self.path
        if self.scheme == "file":
            return f"file://{self.path}"
        return f"{self.scheme}://{self.authority}{self.path}"


def _split(text: str) -> tuple[str, str, str] | None:
    """(scheme, authority, path) of a URI or absolute path; None for a relative path."""
    match = _SCHEME.match(text)
    if match is None or len(match.group(1)) == 1:  # "C:" is no scheme here
        return ("", "", text) if text.startswith("/") else None
    scheme, rest = match.group(1).lower(), match.group(2)
    if rest.startswith("//"):
        authority, _, path = rest[2:].partition("/")
        return scheme, authority, "/" + path
    return scheme, "", rest


def _normalise(scheme: str, path: str) -> str:
    path = posixpath.normpath("/" + path.lstrip("/"))
    if scheme in ("", "file"):
        path = os.path.realpath(path)  # a symlink under the root may point anywhere
    return path


def _root(root: str) -> Location:
    split = _split(root)
    assert split is not None, f"storage root {root!r} must be absolute"  # conf makes it so
    scheme, authority, path = split
    return Location(scheme, authority, _normalise(scheme, path))


def _shown(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."


def _under(field: str, requested: str, root_text: str) -> Location:
    root = _root(root_text)
    if _FORBIDDEN.search(requested):
        raise InvalidJobGroup(field, _shown(requested), "control characters, '%' or '\\'")
    split = _split(requested)
    if split is None:  # relative: under the root
        split = (root.scheme, root.authority, f"{root.path}/{requested}")
    scheme, authority, path = split
    if scheme and scheme not in ALLOWED_SCHEMES:
        raise InvalidJobGroup(
            field, _shown(requested), f"scheme {scheme!r} is not one of {ALLOWED_SCHEMES}"
        )
    local = {"", "file"}
    same_kind = (scheme in local and root.scheme in local) or scheme == root.scheme
    if not same_kind or authority != root.authority:
        raise InvalidJobGroup(field, _shown(requested), f"must be under {root.render()}")
    place = Location(root.scheme, root.authority, _normalise(scheme, path))
    if not place.path.startswith(root.path.rstrip("/") + "/"):
        raise InvalidJobGroup(field, _shown(requested), f"must be under {root.render()}")
    return place


def table_location(field: str, requested: str, root: str, default_name: str) -> str:
    """A table's location: `requested` if it lies under `root`, else `root/default_name`."""
    if not requested:
        return f"{root.rstrip('/')}/{default_name}"
    return _under(field, requested, root).render()


def checkpoint_location(field: str, requested: str, root: str, job_group_id: str) -> str:
    """The group's checkpoint: `<root>/<job_group_id>` or a folder below it."""
    own = f"{root.rstrip('/')}/{job_group_id}"
    if not requested:
        return own
    place = _under(field, requested, root)
    own_path = _root(own).path
    if place.path != own_path and not place.path.startswith(own_path + "/"):
        raise InvalidJobGroup(
            field,
            _shown(requested),
            f"a checkpoint must be the group's own folder {_root(own).render()} or below it "
            "(two groups on one checkpoint break exactly-once)",
        )
    return place.render()
