"""A real standalone ZooKeeper on 127.0.0.1, run from the ZooKeeper jars that Kafka 3.9 ships.

Our brokers run KRaft and need no ZooKeeper; kafka-pixy (consumer-group membership) and
Burrow 1.2 (its own cluster state) still do. Tests use :func:`start_zookeeper`::

    with start_zookeeper(tmp_path / "zk") as zk:
        zk.connect      # "127.0.0.1:<port>"

Layout of a server dir: ``zoo.cfg``, ``log4j.properties``, ``data/``, ``zookeeper.out``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from core.processes import StopOnExit, free_ports, terminate
from devservices.kafka import DEFAULT_JARS_DIR, HOST, jvm_command, log_tail

READY_TIMEOUT_S = 30.0


class ZooKeeperError(RuntimeError):
    """ZooKeeper exited while starting or did not answer in time."""


@dataclass
class ZooKeeper(StopOnExit):
    """One ZooKeeper JVM started by :func:`start_zookeeper`; it runs until :meth:`stop`."""

    port: int
    dir: Path
    process: subprocess.Popen[bytes]

    @property
    def connect(self) -> str:
        return f"{HOST}:{self.port}"

    def stop(self) -> None:
        terminate(self.process, timeout=10.0)


def start_zookeeper(server_dir: Path, jars_dir: Path = DEFAULT_JARS_DIR) -> ZooKeeper:
    """Start ZooKeeper on a free loopback port; returns once it answers `ruok` with `imok`."""
    (server_dir / "data").mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    config = server_dir / "zoo.cfg"
    config.write_text(
        f"dataDir={server_dir / 'data'}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={HOST}\n"
        "tickTime=2000\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok\n"
    )
    log4j = server_dir / "log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=WARN, stdout\n"
        "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
    )
    out_path = server_dir / "zookeeper.out"
    cmd = jvm_command(
        jars_dir,
        log4j,
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(config),
        heap="128m",
    )
    with out_path.open("wb") as out:
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    zookeeper = ZooKeeper(port, server_dir, process)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _answers_ruok(port):
        if process.poll() is not None or time.monotonic() > deadline:
            zookeeper.stop()
            raise ZooKeeperError(
                f"ZooKeeper on {HOST}:{port} did not start (exit {process.returncode}); "
                f"tail of {out_path}:\n{log_tail(out_path)}"
            )
        time.sleep(0.2)
    return zookeeper


def _answers_ruok(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False
