"""Write a consumer service for the dispatcher job (or uForwarder) as one function.

The dispatcher calls your service once per Kafka record: a unary gRPC call to
``/kafka.consumerproxy.<consumer_group>/<topic>`` whose request is the record's value (raw
bytes) and whose response is ``google.protobuf.Empty`` (no bytes), with the record's
coordinates in the call metadata. You write::

    from clients.consumer_service import Commit, Message, Retry, Skip, Stash, serve

    def handle(message: Message):
        if message.value == b"":
            return Skip()          # nothing to do: counts as done
        try:
            store(message.value)
        except TemporaryError:
            return Retry()         # again later, from the next retry tier
        except BadRecord:
            return Stash()         # to the dead-letter queue
        return Commit()

    server, port = serve(handle, "127.0.0.1:50051", consumer_group="orders-svc", topic="orders")
    server.wait_for_termination()

`serve_async` takes an ``async def handle`` (or a plain function) and runs a ``grpc.aio``
server. Each answer is sent as uForwarder's client library sends it, a status plus the
``kafka-action`` trailer, so the dispatcher routes it even if it ignored one of the two:

==========  =====================  ===============  ==========================================
result      gRPC status            kafka-action     what the dispatcher does
==========  =====================  ===============  ==========================================
Commit      OK                     (none)           done
Skip        ALREADY_EXISTS         Skip             done (counted as skipped)
Retry       RESOURCE_EXHAUSTED     Retry            to the retry tier for its retry count
Stash       FAILED_PRECONDITION    Stash            to the DLQ
==========  =====================  ===============  ==========================================

`Retry`, `Skip` and `Stash` take an optional ``status`` (any error code; the trailer decides)
and ``details``. An exception escaping `handle` answers UNKNOWN, which the dispatcher retries in
memory with a backoff (1 ms doubling to 60 s): raise only for errors that pass.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field

import grpc

ACTION = "kafka-action"
METHOD_PREFIX = "kafka.consumerproxy."
# The metadata the dispatcher sets on every call (uForwarder's GrpcRequest).
_OWN = frozenset(
    {
        "kafka-consumergroup",
        "kafka-topic",
        "kafka-partition",
        "kafka-offset",
        "kafka-retrycount",
        "kafka-key-bin",
        "kafka-attemptcount",
        "kafka-tracing-info",
    }
)


@dataclass(frozen=True)
class Message:
    """One record, as the dispatcher delivers it. `topic`, `partition` and `offset` are the
    original (logical) ones even when the record comes from a retry, DLQ or resq topic; then
    `physical` says where it was read."""

    value: bytes
    key: bytes
    consumer_group: str
    topic: str
    partition: int
    offset: int
    retry_count: int  # deliveries from retry tiers so far (0 the first time)
    attempt_count: int  # in-memory attempts before this one
    tracing_info: str = ""  # "physical-topic=..,physical-partition=..,physical-offset=.."
    headers: Mapping[str, str | bytes] = field(default_factory=dict)  # the record's headers
    method: str = ""

    @property
    def physical(self) -> tuple[str, int, int] | None:
        """(topic, partition, offset) the record was read from, when it is not the original."""
        if not self.tracing_info:
            return None
        parts = dict(p.split("=", 1) for p in self.tracing_info.split(",") if "=" in p)
        return (
            parts.get("physical-topic", ""),
            int(parts.get("physical-partition", "-1")),
            int(parts.get("physical-offset", "-1")),
        )

    @classmethod
    def from_call(cls, value: bytes, metadata: Iterable[tuple[str, str | bytes]], method: str = ""):
        md: dict[str, str | bytes] = {}
        for k, v in metadata:
            md.setdefault(k, v)

        def text(name: str, default: str = "") -> str:
            v = md.get(name, default)
            return v.decode() if isinstance(v, bytes) else v

        key = md.get("kafka-key-bin", b"")
        return cls(
            value=value,
            key=key if isinstance(key, bytes) else key.encode(),
            consumer_group=text("kafka-consumergroup"),
            topic=text("kafka-topic"),
            partition=int(text("kafka-partition", "-1")),
            offset=int(text("kafka-offset", "-1")),
            retry_count=int(text("kafka-retrycount", "0")),
            attempt_count=int(text("kafka-attemptcount", "0")),
            tracing_info=text("kafka-tracing-info"),
            headers={k: v for k, v in md.items() if not _transport(k)},
            method=method,
        )


def _transport(key: str) -> bool:
    """Metadata set by the dispatcher or by gRPC itself, not one of the record's headers."""
    return key in _OWN or key == "user-agent" or key.startswith(("grpc-", ":"))


@dataclass(frozen=True)
class Commit:
    """Processed: commit the record."""


@dataclass(frozen=True)
class Retry:
    """Failed for now: deliver again later from the next retry tier."""

    status: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED
    details: str = "retry"


@dataclass(frozen=True)
class Stash:
    """Cannot be processed: put it in the dead-letter queue."""

    status: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION
    details: str = "stash"


@dataclass(frozen=True)
class Skip:
    """Not for this service: count it as done without processing it."""

    status: grpc.StatusCode = grpc.StatusCode.ALREADY_EXISTS
    details: str = "skip"


Result = Commit | Retry | Stash | Skip
_TRAILERS = {Retry: "Retry", Stash: "Stash", Skip: "Skip"}


def method_name(consumer_group: str, topic: str) -> str:
    """The full gRPC method the dispatcher calls by default."""
    return f"/{METHOD_PREFIX}{consumer_group}/{topic}"


def answer(result: Result) -> tuple[grpc.StatusCode, str | None, str]:
    """(status, kafka-action trailer or None, details) for a handler's result."""
    if isinstance(result, Commit):
        return grpc.StatusCode.OK, None, ""
    if isinstance(result, Retry | Stash | Skip):
        if result.status is grpc.StatusCode.OK:
            raise ValueError(f"{type(result).__name__} needs an error status, not OK")
        return result.status, _TRAILERS[type(result)], result.details
    raise TypeError(f"a handler returns Commit, Retry, Stash or Skip, not {result!r}")


class _Service(grpc.GenericRpcHandler):
    """Serves `behaviour(method, request, context)` at the given full method names (every
    method when `methods` is None)."""

    def __init__(self, behaviour, methods: Iterable[str] | None) -> None:
        self._behaviour = behaviour
        self._methods = None if methods is None else frozenset(methods)
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details):
        method = handler_call_details.method
        if self._methods is not None and method not in self._methods:
            return None
        handler = self._handlers.get(method)
        if handler is None:
            handler = grpc.unary_unary_rpc_method_handler(
                functools.partial(self._behaviour, method),
                request_deserializer=None,
                response_serializer=lambda _: b"",
            )
            self._handlers[method] = handler
        return handler


def _methods(consumer_group: str | None, topic: str | None, methods: Iterable[str] | None):
    if methods is not None:
        return list(methods)
    if consumer_group and topic:
        return [method_name(consumer_group, topic)]
    return None  # any method


def consumer_service(
    handle: Callable[[Message], Result],
    *,
    consumer_group: str | None = None,
    topic: str | None = None,
    methods: Iterable[str] | None = None,
) -> grpc.GenericRpcHandler:
    """A generic handler for a `grpc.server` of your own: `handle` at the method for
    (consumer_group, topic), or at `methods`, or (neither) at any method."""

    def behaviour(method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        message = Message.from_call(request, context.invocation_metadata(), method)
        status, trailer, details = answer(handle(message))
        if status is grpc.StatusCode.OK:
            return b""
        if trailer:
            context.set_trailing_metadata(((ACTION, trailer),))
        context.abort(status, details)
        raise AssertionError("unreachable: abort raises")

    return _Service(behaviour, _methods(consumer_group, topic, methods))


def serve(
    handle: Callable[[Message], Result],
    address: str,
    *,
    consumer_group: str | None = None,
    topic: str | None = None,
    methods: Iterable[str] | None = None,
    max_workers: int = 16,
) -> tuple[grpc.Server, int]:
    """Start a threaded gRPC server for `handle` on `address` ("host:port", port 0 picks one,
    or "unix:/path"); returns it, started, and its port (0 for a unix socket)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    server.add_generic_rpc_handlers(
        (consumer_service(handle, consumer_group=consumer_group, topic=topic, methods=methods),)
    )
    port = server.add_insecure_port(address)
    server.start()
    return server, port


async def serve_async(
    handle: Callable[[Message], Result | Awaitable[Result]],
    address: str,
    *,
    consumer_group: str | None = None,
    topic: str | None = None,
    methods: Iterable[str] | None = None,
) -> tuple[grpc.aio.Server, int]:
    """`serve` on asyncio: `handle` may be a coroutine function. Returns the started server and
    its port; `await server.wait_for_termination()` to run it."""

    async def behaviour(method: str, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        message = Message.from_call(request, context.invocation_metadata() or (), method)
        result = handle(message)
        if inspect.isawaitable(result):
            result = await result
        status, trailer, details = answer(result)  # type: ignore[arg-type]
        if status is grpc.StatusCode.OK:
            return b""
        await context.abort(
            status, details, trailing_metadata=((ACTION, trailer),) if trailer else ()
        )
        raise AssertionError("unreachable: abort raises")

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (_Service(behaviour, _methods(consumer_group, topic, methods)),)
    )
    port = server.add_insecure_port(address)
    await server.start()
    return server, port
