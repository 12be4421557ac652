"""The dispatcher benchmark's baseline: what a user would write instead of the dispatcher job.

A minimal Kafka-to-gRPC dispatcher: a confluent-kafka consumer reads the topic from the start,
and grpc.aio calls uForwarder's method for every record with at most `--concurrency` calls in
flight and the same metadata the job sends; no routing (a failed call is only counted), offsets
committed every 2 s up to the last fully answered poll (at-least-once). It stops after
`--records` answers and prints one JSON line: records/s between the first call and the last
answer, and p50/p99 call latency.

    python -m bench.dispatch_handwritten --bootstrap-servers 127.0.0.1:9092 --topic bench \\
        --target 127.0.0.1:50051 --method /kafka.consumerproxy.bench/bench --records 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from array import array

import grpc
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition


async def dispatch(args: argparse.Namespace) -> dict:
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": f"bench-handwritten-{time.time_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 32 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    meta = consumer.list_topics(args.topic, timeout=10).topics[args.topic]
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in meta.partitions])
    loop = asyncio.get_running_loop()
    limit = asyncio.Semaphore(args.concurrency)
    latencies = array("d")
    state = {"answered": 0, "failed": 0, "first": 0.0, "last": 0.0}
    pending_polls: list[list] = []  # [remaining calls, offsets] per poll, in poll order
    async with grpc.aio.insecure_channel(args.target) as channel:
        call = channel.unary_unary(args.method)

        async def one(message, poll: list) -> None:
            started = time.perf_counter()
            try:
                await call(
                    message.value() or b"",
                    metadata=(
                        ("kafka-consumergroup", "bench"),
                        ("kafka-topic", message.topic()),
                        ("kafka-partition", str(message.partition())),
                        ("kafka-offset", str(message.offset())),
                        ("kafka-key-bin", message.key() or b""),
                    ),
                    timeout=30,
                )
            except grpc.aio.AioRpcError:
                state["failed"] += 1
            finally:
                now = time.perf_counter()
                latencies.append((now - started) * 1000)
                state["answered"] += 1
                state["last"] = now
                poll[0] -= 1
                limit.release()

        last_commit = time.monotonic()
        tasks = set()
        while state["answered"] < args.records:
            messages = await loop.run_in_executor(None, consumer.consume, 5000, 0.2)
            messages = [m for m in messages if m.error() is None]
            if not messages:
                await asyncio.sleep(0)
                continue
            poll = [len(messages), {m.partition(): (m.offset() or 0) + 1 for m in messages}]
            pending_polls.append(poll)
            for m in messages:
                await limit.acquire()
                if not state["first"]:
                    state["first"] = time.perf_counter()
                task = asyncio.ensure_future(one(m, poll))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if time.monotonic() - last_commit > 2:
                done: dict[int, int] = {}
                while pending_polls and pending_polls[0][0] == 0:
                    done.update(pending_polls.pop(0)[1])
                if done:
                    consumer.commit(
                        offsets=[TopicPartition(args.topic, p, o) for p, o in done.items()],
                        asynchronous=True,
                    )
                last_commit = time.monotonic()
        await asyncio.gather(*tasks)
    consumer.close()
    ordered = sorted(latencies)
    seconds = state["last"] - state["first"]
    return {
        "records": state["answered"],
        "failed": state["failed"],
        "seconds": seconds,
        "records_per_s": state["answered"] / seconds if seconds > 0 else 0.0,
        "latency_p50_ms": ordered[len(ordered) // 2],
        "latency_p99_ms": ordered[int(len(ordered) * 0.99)],
        "concurrency": args.concurrency,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--target", required=True, help="host:port of the service")
    parser.add_argument("--method", required=True, help="/kafka.consumerproxy.<group>/<topic>")
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(dispatch(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
