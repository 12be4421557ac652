"""The consumer-service helper on a real gRPC server (sync and asyncio), called as the
dispatcher calls it: raw bytes at uForwarder's method name, the kafka-* metadata, and the answer
read back as status plus `kafka-action` trailer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest

from clients.consumer_service import (
    Commit,
    Message,
    Retry,
    Skip,
    Stash,
    answer,
    method_name,
    serve,
    serve_async,
)
from jobs.dispatch.routing import response_code

METADATA = (
    ("kafka-consumergroup", "orders-svc"),
    ("kafka-topic", "orders"),
    ("kafka-partition", "3"),
    ("kafka-offset", "41"),
    ("kafka-retrycount", "2"),
    ("kafka-key-bin", b"\x00key"),
    ("kafka-attemptcount", "1"),
    ("kafka-tracing-info", "physical-topic=orders-r1,physical-partition=0,physical-offset=7"),
    ("trace-id", "abc"),
    ("blob-bin", b"\x01\x02"),
)
RESULTS = {b"commit": Commit(), b"retry": Retry(), b"stash": Stash(), b"skip": Skip()}
# What each result must look like on the wire (uForwarder's ConsumerResponse, Skip as
# ALREADY_EXISTS so it is a skip even for a dispatcher that ignores trailers).
WIRE = {
    b"commit": (grpc.StatusCode.OK, None),
    b"retry": (grpc.StatusCode.RESOURCE_EXHAUSTED, "Retry"),
    b"stash": (grpc.StatusCode.FAILED_PRECONDITION, "Stash"),
    b"skip": (grpc.StatusCode.ALREADY_EXISTS, "Skip"),
}
ROUTED = {b"commit": "COMMIT", b"retry": "RETRY", b"stash": "DLQ", b"skip": "SKIP"}


def call(channel: grpc.Channel, value: bytes) -> tuple[grpc.StatusCode, str | None]:
    stub = channel.unary_unary(method_name("orders-svc", "orders"))
    try:
        _, info = stub.with_call(value, metadata=METADATA, timeout=10)
        trailers = info.trailing_metadata()
        code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        trailers, code = e.trailing_metadata(), e.code()  # type: ignore[attr-defined]
    action = dict(trailers or ()).get("kafka-action")
    return code, action


@pytest.fixture
def received() -> list[Message]:
    return []


@pytest.fixture
def sync_server(received: list[Message]) -> Iterator[str]:
    def handle(message: Message):
        received.append(message)
        if message.value == b"raise":
            raise RuntimeError("boom")
        return RESULTS[message.value]

    server, port = serve(handle, "127.0.0.1:0", consumer_group="orders-svc", topic="orders")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@pytest.mark.parametrize("value", sorted(RESULTS))
def test_sync_answers_carry_status_and_trailer(sync_server: str, value: bytes) -> None:
    with grpc.insecure_channel(sync_server) as channel:
        code, action = call(channel, value)
    assert (code, action) == WIRE[value]
    assert response_code(code.name, action, overdue=False).value == ROUTED[value]


def test_the_message_has_every_field_of_the_call(sync_server: str, received) -> None:
    with grpc.insecure_channel(sync_server) as channel:
        call(channel, b"commit")
    (m,) = received
    assert (m.value, m.key, m.consumer_group, m.topic, m.partition, m.offset) == (
        b"commit",
        b"\x00key",
        "orders-svc",
        "orders",
        3,
        41,
    )
    assert (m.retry_count, m.attempt_count) == (2, 1)
    assert m.physical == ("orders-r1", 0, 7)
    assert m.headers == {"trace-id": "abc", "blob-bin": b"\x01\x02"}
    assert m.method == "/kafka.consumerproxy.orders-svc/orders"


def test_an_exception_is_unknown_which_the_dispatcher_retries_in_memory(sync_server: str) -> None:
    with grpc.insecure_channel(sync_server) as channel:
        code, action = call(channel, b"raise")
    assert (code, action) == (grpc.StatusCode.UNKNOWN, None)
    assert response_code(code.name, action, overdue=False).value == "INVALID"


def test_another_method_is_unimplemented(sync_server: str) -> None:
    with grpc.insecure_channel(sync_server) as channel:
        stub = channel.unary_unary(method_name("other", "orders"))
        with pytest.raises(grpc.RpcError) as e:
            stub(b"x", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def test_asyncio_server_with_a_coroutine_handler() -> None:
    async def main() -> list[tuple[grpc.StatusCode, str | None]]:
        async def handle(message: Message):
            await asyncio.sleep(0)
            return RESULTS[message.value]

        server, port = await serve_async(handle, "127.0.0.1:0")  # any method
        answers = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = channel.unary_unary(method_name("any-group", "any-topic"))
                for value in sorted(RESULTS):
                    try:
                        c = stub(value, metadata=METADATA, timeout=10)
                        await c
                        answers.append((grpc.StatusCode.OK, None))
                    except grpc.aio.AioRpcError as e:
                        answers.append(
                            (e.code(), dict(e.trailing_metadata() or ()).get("kafka-action"))
                        )
        finally:
            await server.stop(0)
        return answers

    assert asyncio.run(main()) == [WIRE[v] for v in sorted(RESULTS)]


def test_results_need_an_error_status() -> None:
    with pytest.raises(ValueError):
        answer(Retry(status=grpc.StatusCode.OK))
    with pytest.raises(TypeError):
        answer("ok")  # type: ignore[arg-type]
    assert answer(Stash(status=grpc.StatusCode.INTERNAL))[:2] == (grpc.StatusCode.INTERNAL, "Stash")
