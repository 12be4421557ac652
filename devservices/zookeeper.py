"""A real standalone ZooKeeper on 127.0.0.1, run from the ZooKeeper jars that Kafka 3.9 ships.

Our brokers run KRaft and need no ZooKeeper; kafka-pixy (consumer-group membership) and
Burrow 1.2 (its own cluster state) still do. Tests use :func:`start_zookeeper` (the
``zookeeper`` fixture)::

    with start_zookeeper(tmp_path / "zk") as zk:
        zk.connect      # "127.0.0.1:<port>"

    python -m devservices.zookeeper up [--dir var/zookeeper] [--port 2181]
    python -m devservices.zookeeper status|down [--dir var/zookeeper]

Layout of a server dir: ``zoo.cfg``, ``log4j.properties``, ``data/``, ``zookeeper.out``,
``zookeeper.pid`` (while it runs), ``zookeeper.ports``.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from core.paths import VAR_DIR
from devservices._service import HOST, LocalService, Port, ServiceCli, ServiceError, read_ports
from devservices.kafka import DEFAULT_JARS_DIR, jvm_command

DEFAULT_DIR = VAR_DIR / "zookeeper"
READY_TIMEOUT_S = 30.0


class ZooKeeperError(ServiceError):
    """ZooKeeper exited while starting or did not answer in time."""


class ZooKeeper(LocalService):
    """One ZooKeeper JVM serving clients on ``port``; ready once ``srvr`` shows it serving
    (``ruok`` answers ``imok`` as soon as the port listens, while the server is still loading
    its data and closes every session: a client connecting then fails)."""

    error = ZooKeeperError
    ready_timeout = READY_TIMEOUT_S
    port = Port("client")

    def __init__(self, dir: Path, port: int = 0) -> None:
        super().__init__(dir, "zookeeper", ports={"client": port})

    @property
    def connect(self) -> str:
        """The connect string clients take, ``127.0.0.1:<port>``."""
        return f"{HOST}:{self.port}"

    def ready(self) -> bool:
        return serving(self._four_letter(b"srvr"))

    def _four_letter(self, command: bytes) -> bytes:
        """The whole answer to a four-letter command; empty when the port does not answer."""
        answer = b""
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                sock.sendall(command)
                while chunk := sock.recv(4096):
                    answer += chunk
        except OSError:
            pass
        return answer

    def describe(self) -> str:
        return self.connect


def serving(srvr_answer: bytes) -> bool:
    """True if an answer to ``srvr`` is the server's statistics (with its ``Mode:``), not
    "This ZooKeeper instance is not currently serving requests" or nothing."""
    return b"\nMode: " in srvr_answer


def start_zookeeper(
    server_dir: Path, jars_dir: Path = DEFAULT_JARS_DIR, port: int = 0
) -> ZooKeeper:
    """Start ZooKeeper on ``port`` (0: a free one); returns once it serves (see `ZooKeeper`).

    Raises :class:`ZooKeeperError` with the tail of its output if it exits or does not answer
    in time; it is stopped in that case.
    """
    zookeeper = ZooKeeper(server_dir, port)
    data = zookeeper.dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = zookeeper.dir / "zoo.cfg"
    config.write_text(
        f"dataDir={data}\n"
        f"clientPort={zookeeper.port}\n"
        f"clientPortAddress={HOST}\n"
        "tickTime=2000\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr\n"
    )
    log4j = zookeeper.dir / "log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=WARN, stdout\n"
        "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
    )
    main_class = "org.apache.zookeeper.server.ZooKeeperServerMain"
    return zookeeper.start(jvm_command(jars_dir, log4j, main_class, str(config), heap="128m"))


# --- CLI -------------------------------------------------------------------------------------


def _recorded(dir: Path) -> list[ZooKeeper]:
    ports = read_ports(dir, "zookeeper")
    return [ZooKeeper(dir, ports["client"])] if ports else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--port", type=int, default=2181, help="client port (default: 2181)")


def _start(args: argparse.Namespace) -> list[ZooKeeper]:
    return [start_zookeeper(args.dir, port=args.port)]


main = ServiceCli(
    "devservices.zookeeper", __doc__, DEFAULT_DIR, _recorded, _start, _up_arguments
).main


if __name__ == "__main__":
    sys.exit(main())
