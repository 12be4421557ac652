"""The audit interceptor plugin (`clients/audit_interceptor`, Rust), seen from Python.

librdkafka loads the plugin into a producer or consumer through `plugin.library.paths`; the
client then counts what it handled in librdkafka's own threads, with no Python call per record.
`NativeTally` creates the plugin's tally, gives the client configuration that points a client
at it, and drains it into the same `core.audit_reports.WindowCounts` the pure-Python
`WindowTally` gives, so `AuditReporter` reports both alike.

The library is `build/native/libuatu_audit.so` (`make build`), or the file named by the
environment variable UATU_AUDIT_PLUGIN.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import confluent_kafka
from datasketches import hll_sketch, kll_doubles_sketch

from core.audit_reports import DEFAULT_LG_K, WindowCounts, check_tally_settings

PLUGIN_ENV = "UATU_AUDIT_PLUGIN"
DEFAULT_PLUGIN = Path(__file__).resolve().parents[1] / "build" / "native" / "libuatu_audit.so"
TALLY_PROPERTY = "uatu.audit.tally"


class PluginMissing(RuntimeError):
    """The plugin library is not built (or UATU_AUDIT_PLUGIN names no file)."""


def plugin_path() -> Path:
    path = Path(os.environ.get(PLUGIN_ENV) or DEFAULT_PLUGIN)
    if not path.is_file():
        raise PluginMissing(
            f"{PLUGIN_ENV}={path}: the audit interceptor plugin is not there; build it with "
            "`make build` (clients/audit_interceptor)"
        )
    return path


def _make_librdkafka_global() -> None:
    """The plugin's calls into librdkafka resolve against the process's global symbols, but
    Python loaded confluent-kafka's librdkafka privately; loading it again with RTLD_GLOBAL
    makes the already-loaded copy global (no second copy is loaded)."""
    bundled = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    candidates = sorted(bundled.glob("librdkafka*.so*")) if bundled.is_dir() else []
    name = str(candidates[0]) if candidates else "librdkafka.so.1"
    ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


@cache
def _library() -> ctypes.CDLL:
    path = plugin_path()
    _make_librdkafka_global()
    lib = ctypes.CDLL(str(path))
    lib.uatu_tally_create.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int]
    lib.uatu_tally_create.restype = ctypes.c_int
    lib.uatu_tally_drain.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.uatu_tally_drain.restype = ctypes.c_int
    lib.uatu_buffer_free.argtypes = [ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t]
    lib.uatu_buffer_free.restype = None
    lib.uatu_tally_close.argtypes = [ctypes.c_char_p]
    lib.uatu_tally_close.restype = ctypes.c_int
    return lib


_HEAD = struct.Struct("<qQQQ")  # window start, messages, bytes, failed


def decode(blob: bytes, lg_k: int) -> dict[tuple[str, int], WindowCounts]:
    """The plugin's drain format (`tally::encode` in the Rust crate) as WindowCounts."""
    (count,) = struct.unpack_from("<I", blob, 0)
    offset = 4
    windows: dict[tuple[str, int], WindowCounts] = {}

    def chunk() -> bytes:
        nonlocal offset
        (length,) = struct.unpack_from("<I", blob, offset)
        offset += 4 + length
        return blob[offset - length : offset]

    for _ in range(count):
        topic = chunk().decode()
        start, messages, size, failed = _HEAD.unpack_from(blob, offset)
        offset += _HEAD.size
        hll, kll = chunk(), chunk()
        windows[(topic, start)] = WindowCounts(
            lg_k,
            message_count=messages,
            byte_count=size,
            failed_count=failed,
            hll=hll_sketch.deserialize(hll) if hll else None,
            kll=kll_doubles_sketch.deserialize(kll) if kll else None,
        )
    if offset != len(blob):
        raise ValueError(f"tally drain: {len(blob) - offset} trailing bytes")
    return windows


class NativeTally:
    """A tally of the plugin, for one client: `client_config()` goes into the client's
    configuration, `drain()` is `WindowTally.drain` (what was counted since the last drain)."""

    def __init__(self, window_seconds: int = 60, lg_k: int = DEFAULT_LG_K) -> None:
        check_tally_settings(window_seconds, lg_k)
        self.window_seconds = window_seconds
        self.lg_k = lg_k
        self.path = plugin_path()
        self._lib = _library()
        self._id = uuid.uuid4().hex.encode()
        self._lock = threading.Lock()
        if self._lib.uatu_tally_create(self._id, window_seconds, lg_k) != 0:
            raise RuntimeError(f"uatu_tally_create({self._id.decode()}) failed")

    def client_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """`config` plus the plugin: its path is added to any `plugin.library.paths` already
        there, and the tally's id follows it (librdkafka accepts a plugin's property only once
        the plugin is loaded, in the order the keys come)."""
        config = dict(config)
        paths = [p for p in str(config.pop("plugin.library.paths", "")).split(";") if p]
        return {**config, "plugin.library.paths": ";".join([*paths, str(self.path)]),
                TALLY_PROPERTY: self._id.decode()}  # fmt: skip

    def drain(self) -> dict[tuple[str, int], WindowCounts]:
        buffer = ctypes.POINTER(ctypes.c_uint8)()
        length = ctypes.c_size_t()
        with self._lock:
            if self._lib.uatu_tally_drain(self._id, ctypes.byref(buffer), ctypes.byref(length)):
                raise RuntimeError(f"tally {self._id.decode()} is closed")
            try:
                blob = ctypes.string_at(buffer, length.value)
            finally:
                self._lib.uatu_buffer_free(buffer, length.value)
        return decode(blob, self.lg_k)

    def close(self) -> None:
        """Forget the tally (a client still open keeps counting into its own reference)."""
        self._lib.uatu_tally_close(self._id)
