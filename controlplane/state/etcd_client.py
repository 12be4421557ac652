"""A minimal client for etcd's v3 JSON gateway, shared by the etcd store and leader election.

Why plain HTTP on the standard library rather than a client package:

* the gRPC clients (`etcd3`, its forks) ship generated protobuf code that clashes with the
  protobuf the control plane's own gRPC stack pins (kragniz/python-etcd3#2709);
* `etcd3gw` speaks the same JSON gateway, but everything the store needs (CAS transactions
  with a failure branch, paged ranges, lease keepalive) would be raw request dicts anyway,
  and it brings `requests`, `pbr`, `six` and `futurist`, with no timeout by default;
* here every call has a timeout and every failure maps onto one of two named errors, which
  is what leader election needs to stop believing it leads within its TTL.

Every RPC is ``POST {endpoint}/v3/<service>/<method>`` with a JSON body (the gateway prefix
is ``/v3/`` since etcd 3.4). Keys and values travel base64-encoded; int64 fields come back as
strings and fields equal to their default (``succeeded: false``, ``count: 0``) are omitted.

`EtcdClient` is thread-safe: each thread keeps its own keep-alive connection.

Access (`EtcdAccess`): one or more endpoints, ``http://`` or ``https://``; for https a CA
file to verify etcd with and optionally a client certificate and key (etcd's
--client-cert-auth); optionally a user and password (etcd's auth: a token from
``auth/authenticate`` is sent as the Authorization header, and fetched again when etcd says
it expired). Failover: a connection that cannot be opened moves on to the next endpoint at
once (nothing was sent); a call that fails after it was sent is not resent (it may have been
applied) but raises StoreUnavailable, and the next call starts at the next endpoint.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from controlplane.errors import StoreUnavailable
from core.errors import UatuError
from core.faults import FaultInjected, fault_point

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


# etcd's answers when a request lacks a valid token: INVALID_ARGUMENT "user name is empty",
# UNAUTHENTICATED "invalid auth token" (gRPC codes 3 and 16).
_AUTH_MESSAGES = ("invalid auth token", "user name is empty", "token is expired")


@dataclass(frozen=True)
class EtcdAccess:
    """How to reach and authenticate to an etcd cluster."""

    endpoints: tuple[str, ...]
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, endpoints: str | Sequence[str] | EtcdAccess) -> EtcdAccess:
        if isinstance(endpoints, EtcdAccess):
            return endpoints
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        return cls(tuple(e.strip() for e in endpoints if e.strip()))

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


class _Endpoint(NamedTuple):
    url: str
    scheme: str
    host: str
    port: int


class EtcdClient:
    """Calls to an etcd cluster (`EtcdAccess`, or an ``http(s)://host:port`` list);
    `timeout` is per call, in seconds."""

    def __init__(self, access: str | Sequence[str] | EtcdAccess, timeout: float = 5.0) -> None:
        self.access = EtcdAccess.of(access)
        self._endpoints = []
        for endpoint in self.access.endpoints:
            url = urllib.parse.urlsplit(endpoint)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(
                    f"etcd endpoint must look like http(s)://host:port, got {endpoint!r}"
                )
            if url.scheme == "http" and (self.access.cert_file or self.access.ca_file):
                raise ValueError(f"{endpoint}: a CA or client certificate needs https://")
            self._endpoints.append(
                _Endpoint(endpoint.rstrip("/"), url.scheme, url.hostname, url.port or 2379)
            )
        if not self._endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoint = ",".join(e.url for e in self._endpoints)
        self.timeout = timeout
        self._ssl = (
            self.access.ssl_context() if any(e.scheme == "https" for e in self._endpoints) else None
        )
        self._current = 0  # index of the endpoint calls go to; moves on failure
        self._token: str | None = None
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

        Raises `StoreUnavailable` when no endpoint can be reached, one times out or says it is
        unavailable (no leader, shutting down), `EtcdRequestFailed` for any other error answer.
        """
        if self.access.user and self._token is None and method != "auth/authenticate":
            self._authenticate()
        try:
            return self._call_once(method, body, timeout)
        except EtcdRequestFailed as e:
            if not self.access.user or not any(m in str(e) for m in _AUTH_MESSAGES):
                raise
        self._authenticate()  # the token expired (or etcd restarted): once more with a new one
        return self._call_once(method, body, timeout)

    def _authenticate(self) -> None:
        answer = self._call_once(
            "auth/authenticate",
            {"name": self.access.user, "password": self.access.password},
            None,
        )
        self._token = str(answer.get("token") or "") or None

    def _call_once(self, method: str, body: Json, timeout: float | None) -> Json:
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self._token and method != "auth/authenticate":
            headers["Authorization"] = self._token
        refused: list[str] = []
        for _ in range(len(self._endpoints)):
            endpoint = self._endpoints[self._current % len(self._endpoints)]
            for attempt in (1, 2):
                conn, reused = self._connection(endpoint)
                try:
                    conn.timeout = self.timeout if timeout is None else timeout
                    if conn.sock is None:
                        conn.connect()
                    else:
                        conn.sock.settimeout(conn.timeout)
                except OSError as e:  # nothing was sent: the next endpoint may answer
                    self._drop(conn)
                    refused.append(f"{endpoint.url}: {e!r}")
                    break
                try:
                    conn.request("POST", f"/v3/{method}", payload, headers)
                    resp = conn.getresponse()
                    status, data = resp.status, resp.read()
                    fault_point("controlplane.etcd_answered")
                except _STALE_CONNECTION as e:
                    self._drop(conn)
                    if reused and attempt == 1:
                        continue
                    self._advance()
                    raise StoreUnavailable(endpoint.url, f"{method}: {e!r}") from e
                except (OSError, http.client.HTTPException, FaultInjected) as e:
                    # The request may or may not have been applied: never resend it.
                    self._drop(conn)
                    self._advance()
                    raise StoreUnavailable(endpoint.url, f"{method}: {e!r}") from e
                return self._decode(endpoint.url, method, status, data)
            self._advance()
        raise StoreUnavailable(self.endpoint, f"{method}: no endpoint answered: {refused}")

    def _advance(self) -> None:
        self._current = (self._current + 1) % len(self._endpoints)

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

    def _connection(self, endpoint: _Endpoint) -> tuple[http.client.HTTPConnection, bool]:
        conns: dict[str, http.client.HTTPConnection] = getattr(self._local, "conns", None) or {}
        self._local.conns = conns
        conn = conns.get(endpoint.url)
        if conn is not None:
            return conn, True
        if endpoint.scheme == "https":
            conn = http.client.HTTPSConnection(
                endpoint.host, endpoint.port, timeout=self.timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=self.timeout)
        conns[endpoint.url] = conn
        with self._lock:
            self._connections.append(conn)
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        conns: dict[str, http.client.HTTPConnection] = getattr(self._local, "conns", None) or {}
        for url, known in list(conns.items()):
            if known is conn:
                del conns[url]
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)

    def _decode(self, endpoint: str, method: str, status: int, data: bytes) -> Json:
        try:
            answer = json.loads(data) if data else {}
        except ValueError:
            answer = {"message": data[:200].decode(errors="replace")}
        if status == 200 and isinstance(answer, dict):
            return answer
        code = answer.get("code") if isinstance(answer, dict) else None
        message = str(answer.get("message") or answer.get("error") or f"HTTP {status}")
        if code in _UNAVAILABLE_CODES or status in (503, 504):
            self._advance()
            raise StoreUnavailable(endpoint, f"{method}: {message}")
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


def unmodified_since(key: bytes, range_end: bytes, revision: int) -> Json:
    """Compare: no key in [key, range_end) was written after ``revision`` (a deleted key no
    longer counts; an empty range holds)."""
    return {
        "key": b64(key),
        "range_end": b64(range_end),
        "target": "MOD",
        "result": "LESS",
        "mod_revision": str(revision + 1),
    }


def revision(answer: Json) -> int:
    """The store revision an answer was produced at (a write's own revision)."""
    return int(answer["header"]["revision"])


def failure_kv(answer: Json, index: int = 0) -> KeyValue | None:
    """The key read by the ``index``-th range op of a txn's failure branch, if it exists."""
    kvs = answer["responses"][index]["response_range"].get("kvs", [])
    return KeyValue.from_json(kvs[0]) if kvs else None
