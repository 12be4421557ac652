"""A minimal client for etcd's v3 JSON gateway, shared by the etcd store and leader election.

Why plain HTTP on the standard library rather than a client package:

* the gRPC clients (`etcd3`, its forks) ship generated protobuf code that clashes with the
  protobuf the control plane's own gRPC stack pins (see spark-platform-notes.md section 7);
* `etcd3gw` speaks the same JSON gateway, but everything the store needs (CAS transactions
  with a failure branch, paged ranges, lease keepalive) would be raw request dicts anyway,
  and it brings `requests`, `pbr`, `six` and `futurist`, with no timeout by default;
* here every call has a timeout and every failure maps onto one of two named errors, which
  is what leader election needs to stop believing it leads within its TTL.

Every RPC is ``POST {endpoint}/v3/<service>/<method>`` with a JSON body (the gateway prefix
is ``/v3/`` since etcd 3.4). Keys and values travel base64-encoded; int64 fields come back as
strings and fields equal to their default (``succeeded: false``, ``count: 0``) are omitted.

`EtcdClient` is thread-safe: each thread keeps its own keep-alive connection.
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from controlplane.errors import StoreUnavailable
from core.errors import UatuError

# gRPC status codes that mean "try again later" rather than "your request is wrong".
_UNAVAILABLE_CODES = {4, 14}  # DEADLINE_EXCEEDED, UNAVAILABLE
# Errors that a keep-alive connection closed by the server raises on its next use: the
# server never read the request, so sending it again on a new connection is safe.
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)

Json = dict[str, Any]


class EtcdRequestFailed(UatuError):
    """etcd rejected a request (a bug or a limit, e.g. too many operations in one txn)."""

    def __init__(self, method: str, code: int | None, message: str) -> None:
        self.code = code
        super().__init__(f"etcd {method} failed (gRPC code {code}): {message}")


class KeyValue(NamedTuple):
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int

    @classmethod
    def from_json(cls, kv: Json) -> KeyValue:
        return cls(
            unb64(kv["key"]),
            unb64(kv.get("value", "")),
            int(kv.get("create_revision", 0)),
            int(kv.get("mod_revision", 0)),
        )


class EtcdClient:
    """Calls to one etcd endpoint (``http://host:port``); `timeout` is per call, in seconds."""

    def __init__(self, endpoint: str, timeout: float = 5.0) -> None:
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"etcd endpoint must look like http://host:port, got {endpoint!r}")
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self._host = url.hostname
        self._port = url.port or 2379
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[http.client.HTTPConnection] = []

    def close(self) -> None:
        """Close every thread's connection; a later call opens a new one."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def call(self, method: str, body: Json, timeout: float | None = None) -> Json:
        """POST ``body`` to ``/v3/<method>`` and return the decoded answer.

        Raises `StoreUnavailable` when etcd cannot be reached, times out or says it is
        unavailable (no leader, shutting down), `EtcdRequestFailed` for any other error answer.
        """
        payload = json.dumps(body).encode()
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                conn.timeout = self.timeout if timeout is None else timeout
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                conn.request("POST", f"/v3/{method}", payload, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
            except _STALE_CONNECTION as e:
                self._drop(conn)
                if reused and attempt == 1:
                    continue
                raise StoreUnavailable(self.endpoint, f"{method}: {e!r}") from e
            except (OSError, http.client.HTTPException) as e:
                # The request may or may not have been applied: never resend it.
                self._drop(conn)
                raise StoreUnavailable(self.endpoint, f"{method}: {e!r}") from e
            return self._decode(method, status, data)
        raise AssertionError("unreachable")

    def range(
        self, key: bytes, range_end: bytes | None = None, limit: int = 0, count_only: bool = False
    ) -> Json:
        body: Json = {"key": b64(key), "limit": str(limit)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        if count_only:
            body["count_only"] = True
        return self.call("kv/range", body)

    def get(self, key: bytes) -> KeyValue | None:
        kvs = self.range(key).get("kvs", [])
        return KeyValue.from_json(kvs[0]) if kvs else None

    def scan(self, prefix: bytes, page_size: int = 500) -> Iterator[KeyValue]:
        """Every key under ``prefix`` in key order, fetched ``page_size`` keys per request.

        Each page is read at the revision current when it is fetched: a key written during
        the scan may or may not appear, but none appears twice and the order holds.
        """
        start, end = prefix, prefix_end(prefix)
        while True:
            resp = self.range(start, end, limit=page_size)
            kvs = [KeyValue.from_json(kv) for kv in resp.get("kvs", [])]
            yield from kvs
            if not resp.get("more") or not kvs:
                return
            # The smallest key after the last one: the same key with a zero byte appended.
            start = kvs[-1].key + b"\0"

    def txn(
        self, compare: Sequence[Json], success: Sequence[Json], failure: Sequence[Json] = ()
    ) -> Json:
        """One atomic If/Then/Else; the answer's ``succeeded`` is absent when compare failed."""
        return self.call(
            "kv/txn", {"compare": list(compare), "success": list(success), "failure": list(failure)}
        )

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)

    def _decode(self, method: str, status: int, data: bytes) -> Json:
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {"message": data[:200].decode(errors="replace")}
        if status == 200 and isinstance(answer, dict):
            return answer
        code = answer.get("code") if isinstance(answer, dict) else None
        message = str(answer.get("message") or answer.get("error") or f"HTTP {status}")
        if code in _UNAVAILABLE_CODES or status in (503, 504):
            raise StoreUnavailable(self.endpoint, f"{method}: {message}")
        raise EtcdRequestFailed(method, code, message)


# --- request builders ------------------------------------------------------------------------


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def unb64(data: str) -> bytes:
    return base64.b64decode(data)


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that selects exactly the keys starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\0"  # etcd's "to the end of the keyspace"
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def put(key: bytes, value: bytes, lease: int = 0) -> Json:
    request: Json = {"key": b64(key), "value": b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def get(key: bytes) -> Json:
    return {"request_range": {"key": b64(key)}}


def delete(key: bytes) -> Json:
    return {"request_delete_range": {"key": b64(key)}}


def created_at(key: bytes, revision: int) -> Json:
    """Compare: the key's create_revision equals ``revision`` (0: the key does not exist)."""
    return {
        "key": b64(key),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": str(revision),
    }


def exists(key: bytes) -> Json:
    return {"key": b64(key), "target": "CREATE", "result": "GREATER", "create_revision": "0"}


def modified_at(key: bytes, revision: int) -> Json:
    """Compare: the key's mod_revision equals ``revision`` (0 also matches a missing key)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def revision(answer: Json) -> int:
    """The store revision an answer was produced at (a write's own revision)."""
    return int(answer["header"]["revision"])


def failure_kv(answer: Json, index: int = 0) -> KeyValue | None:
    """The key read by the ``index``-th range op of a txn's failure branch, if it exists."""
    kvs = answer["responses"][index]["response_range"].get("kvs", [])
    return KeyValue.from_json(kvs[0]) if kvs else None
