"""A small typed client for kafka-pixy's gRPC API (``kafkapixy.proto``), for the PROXY_* probes.

    with PixyClient("127.0.0.1:19091", cluster="default") as pixy:
        partition, offset = pixy.produce("probe", key_for_partition(2, 8), b"...", timeout_s=5)
        msg = pixy.consume("probe", "probe-group", ack=None, timeout_s=5)   # None: no message
        msg = pixy.consume("probe", "probe-group", ack=msg, timeout_s=5)    # acks the previous
        pixy.ack("probe-group", msg, timeout_s=5)                           # the last one

Produce is synchronous: it returns once Kafka acknowledged the write (pixy's
``producer.required_acks``). ConsumeNAck long-polls: on a drained topic it blocks for pixy's
``consumer.long_polling_timeout`` and then answers NOT_FOUND, which :meth:`PixyClient.consume`
turns into None, so ``timeout_s`` must be longer than that.

kafka-pixy cannot write to a chosen partition. It hands keyed messages to Sarama's hash
partitioner (``producer.partitioner: hash``, its default): FNV-1a 32 of the key bytes, read
as a signed int32, Go's truncated ``%`` by the partition count, then the absolute value (Sarama
1.23.1 ``hashPartitioner.Partition`` with ``referenceAbs=false``). That is neither the Java
client's murmur2 nor librdkafka's default, so :func:`key_for_partition` searches for a key
that this partitioner sends to the wanted partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import grpc
import kafkapixy_pb2 as pb
import kafkapixy_pb2_grpc as pb_grpc

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193
_MAX_KEY_SEARCH = 1_000_000


class ProxyError(RuntimeError):
    """A kafka-pixy call failed; ``code`` is the gRPC status code (e.g. INVALID_ARGUMENT for an
    unknown topic or cluster, UNAVAILABLE, DEADLINE_EXCEEDED when ``timeout_s`` ran out)."""

    def __init__(
        self, call: str, code: grpc.StatusCode, details: str, cluster: str, topic: str
    ) -> None:
        self.call = call
        self.code = code
        self.details = details
        self.cluster = cluster
        self.topic = topic
        super().__init__(
            f"kafka-pixy {call} cluster={cluster or '(default)'!s} topic={topic}: "
            f"{code.name}: {details}"
        )


@dataclass(frozen=True)
class ProxyMessage:
    """One message handed out by ConsumeNAck; pass it back as the next call's ``ack``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None  # None: produced without a key
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


def fnv1a_32(data: bytes) -> int:
    """FNV-1a, 32 bit (Go's ``hash/fnv.New32a``)."""
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def sarama_hash_partition(key: bytes, partitions: int) -> int:
    """The partition kafka-pixy (Sarama 1.23.1's hash partitioner) writes ``key`` to."""
    if partitions < 1:
        raise ValueError(f"partitions={partitions}: must be >= 1")
    h = fnv1a_32(key)
    signed = h - (1 << 32) if h >= (1 << 31) else h
    # Go: int32(h) % n truncates toward zero, then a negative result is negated; both equal
    # |int32(h)| mod n.
    return abs(signed) % partitions


def key_for_partition(partition: int, partitions: int, prefix: bytes = b"probe-") -> bytes:
    """A key that kafka-pixy routes to ``partition`` of a topic with ``partitions`` partitions.

    Deterministic: the first of ``<prefix><partition>-0``, ``<prefix><partition>-1``, ... that
    hashes there (about ``partitions`` tries). The mapping holds only while the topic keeps
    this partition count.
    """
    if not 0 <= partition < partitions:
        raise ValueError(f"partition={partition}: must be in [0, {partitions})")
    head = prefix + f"{partition}-".encode()
    for i in range(_MAX_KEY_SEARCH):
        key = head + str(i).encode()
        if sarama_hash_partition(key, partitions) == partition:
            return key
    raise ValueError(f"no key for partition {partition} of {partitions} in {_MAX_KEY_SEARCH}")


class PixyClient:
    """Produce, ConsumeNAck and Ack against one kafka-pixy; thread-safe (one gRPC channel).

    ``cluster`` is the cluster's name in kafka-pixy's config; "" means its default cluster.
    """

    def __init__(self, grpc_address: str, cluster: str = "") -> None:
        self.grpc_address = grpc_address
        self.cluster = cluster
        self._channel = grpc.insecure_channel(grpc_address)
        self._stub = pb_grpc.KafkaPixyStub(self._channel)

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        timeout_s: float,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[int, int]:
        """Write one message and wait for Kafka's acknowledgement; return (partition, offset).

        ``key=None`` lets pixy pick a random partition; any bytes are hashed. b"" is hashed
        too (always the same partition) but Kafka stores it as a null key, so a consumer
        reads it back as None.
        """
        request = pb.ProdRq(
            cluster=self.cluster,
            topic=topic,
            key_value=key or b"",
            key_undefined=key is None,
            message=value,
            async_mode=False,
            headers=[pb.RecordHeader(key=k, value=v) for k, v in headers],
        )
        try:
            response = self._stub.Produce(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise self._error("Produce", topic, e) from e
        return int(response.partition), int(response.offset)

    def consume(
        self, topic: str, group: str, ack: ProxyMessage | None, timeout_s: float
    ) -> ProxyMessage | None:
        """Ack ``ack`` (the previous message of this topic, or None) and take the next message
        for ``group``; None when none arrived within pixy's long-polling timeout."""
        if ack is not None and ack.topic != topic:
            raise ValueError(f"ack is a message of topic {ack.topic!r}, not {topic!r}")
        request = pb.ConsNAckRq(
            cluster=self.cluster,
            topic=topic,
            group=group,
            no_ack=ack is None,
            ack_partition=ack.partition if ack is not None else 0,
            ack_offset=ack.offset if ack is not None else 0,
        )
        try:
            response = self._stub.ConsumeNAck(request, timeout=timeout_s)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise self._error("ConsumeNAck", topic, e) from e
        return ProxyMessage(
            topic=topic,
            partition=int(response.partition),
            offset=int(response.offset),
            key=None if response.key_undefined else bytes(response.key_value),
            value=bytes(response.message),
            headers=tuple((h.key, bytes(h.value)) for h in response.headers),
        )

    def ack(self, group: str, message: ProxyMessage, timeout_s: float) -> None:
        """Acknowledge ``message`` without taking another one (e.g. before shutting down)."""
        request = pb.AckRq(
            cluster=self.cluster,
            topic=message.topic,
            group=group,
            partition=message.partition,
            offset=message.offset,
        )
        try:
            self._stub.Ack(request, timeout=timeout_s)
        except grpc.RpcError as e:
            raise self._error("Ack", message.topic, e) from e

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PixyClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _error(self, call: str, topic: str, e: grpc.RpcError) -> ProxyError:
        # Errors raised by a call are also grpc.Call objects (code() and details()).
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        return ProxyError(call, code, details or "", self.cluster, topic)
