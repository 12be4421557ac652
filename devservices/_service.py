"""The lifecycle every local service shares: :class:`LocalService` and its command line.

A :class:`LocalService` is one server process on 127.0.0.1 that owns a dir::

    <dir>/<name>.pid     its pid, which is also its process group id, while it runs
    <dir>/<name>.ports   its ports, as JSON ({"client": 2379, ...}), of the current or last run
    <dir>/<name>.out     its stdout and stderr of the current run (some services name it .log)

A subclass says what the service is: its ports (given to ``__init__``; 0 picks a free one),
its command line (given to :meth:`~LocalService.start`), when it is ready
(:meth:`~LocalService.ready`) and where it serves (:meth:`~LocalService.describe`). The base
does the rest the same way for every service: a process group of its own with output to a
file, waiting for readiness (failing at once, with the log tail, if the process exits),
stopping (SIGTERM, a grace period, SIGKILL to the whole group; idempotent), pid files that a
later process can trust (``down`` uses them), ``with`` blocks, and the ``up``/``down``/
``status`` command line (:class:`ServiceCli`).

A service of several processes (a Kafka cluster, a Spark master and worker) holds several
LocalServices and uses :func:`wait_all_ready` and :func:`stop_all`, which handle many at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, overload

from core.processes import free_ports, group_pids, pid_alive, read_pid, signal_group

log = logging.getLogger("uatu.devservices")

HOST = "127.0.0.1"
"""Every local service listens on loopback only."""

_KILL_WAIT_S = 10.0  # how long SIGKILLed processes get to disappear before we give up
_TAIL_BYTES = 16384


class ServiceError(RuntimeError):
    """A local service could not start, was not ready in time, or failed a request.

    Each service raises its own subclass (``KafkaBrokerError``, ``EtcdServerError``, ...).
    """


class StopOnExit(ABC):
    """Something started that ``with start_x(...) as x:`` stops when the block ends."""

    @abstractmethod
    def stop(self) -> None:
        """Stop it; idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def stopped_on_failure(started: StopOnExit) -> Iterator[None]:
    """Stop ``started`` if the block raises anything, Ctrl-C included, and re-raise.

    Half a started service holds ports, and nobody holds it to stop it later.
    """
    try:
        yield
    except BaseException:
        started.stop()
        raise


def choose_ports(wanted: Mapping[str, int], exclude: Iterable[int] = ()) -> dict[str, int]:
    """``wanted`` with every 0 replaced by a distinct port of ``HOST`` that was free a moment
    ago, none of them among the fixed ports or ``exclude``."""
    fixed = [port for port in wanted.values() if port]
    picked = iter(free_ports(len(wanted) - len(fixed), HOST, exclude=[*fixed, *exclude]))
    return {name: port or next(picked) for name, port in wanted.items()}


def port_free(port: int) -> bool:
    """True if a server could listen on ``HOST:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the servers we start (JVM, Go), which set SO_REUSEADDR: TIME_WAIT is usable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def read_ports(dir: Path, name: str) -> dict[str, int]:
    """The ports recorded by the last launch of service ``name`` in ``dir``; {} if none."""
    try:
        ports = json.loads((dir / f"{name}.ports").read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in ports.items()} if isinstance(ports, dict) else {}


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, for error messages; never raises."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


@dataclass(frozen=True)
class ServiceStatus:
    """One service as ``status`` sees it; ``pid`` is None when it does not run."""

    label: str
    where: str
    pid: int | None
    ready: bool

    @property
    def ok(self) -> bool:
        return self.pid is not None and self.ready

    def __str__(self) -> str:
        if self.pid is None:
            return f"{self.label}  {self.where}  stopped"
        return (
            f"{self.label}  {self.where}  running (pid {self.pid}), "
            f"{'ready' if self.ready else 'NOT ready'}"
        )


class Port:
    """A read-only attribute of a :class:`LocalService`: its port for one role.

    ``client_port = Port("client")`` in a subclass reads ``self.ports["client"]``.
    """

    def __init__(self, role: str) -> None:
        self.role = role

    @overload
    def __get__(self, service: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, service: LocalService, owner: type[Any]) -> int: ...

    def __get__(self, service: LocalService | None, owner: type[Any]) -> int | Self:
        return self if service is None else service.ports[self.role]


class LocalService(StopOnExit):
    """One server process on ``HOST`` with a dir of its own (layout in the module docstring).

    The process is not tied to this object's lifetime: it runs until :meth:`stop` (or the end
    of a ``with`` block), which is what lets ``up`` leave it in the background and ``down``,
    another process, stop it through the pid file.
    """

    error: ClassVar[type[ServiceError]] = ServiceError
    """What this service raises; messages about the process carry its log tail."""
    ready_timeout: ClassVar[float] = 30.0
    stop_timeout: ClassVar[float] = 10.0
    """Grace between SIGTERM and SIGKILL."""
    poll_interval: ClassVar[float] = 0.2

    def __init__(
        self,
        dir: Path,
        name: str,
        *,
        ports: Mapping[str, int] | None = None,
        out_name: str | None = None,
        label: str | None = None,
    ) -> None:
        """``name`` names the pid, ports and output files; ``label`` (default ``name``) names
        the service in messages; ``ports`` maps a role to a port, 0 meaning a free one."""
        self.dir = dir.resolve()
        self.name = name
        self.label = label or name
        self.ports = choose_ports(ports or {})
        self.out_path = self.dir / (out_name or f"{name}.out")
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r}, dir={str(self.dir)!r}, ports={self.ports})"

    @property
    def pid_path(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    def ports_path(self) -> Path:
        return self.dir / f"{self.name}.ports"

    @property
    def pid(self) -> int | None:
        """The pid (= process group id) of the process this object launched, None before."""
        return self.process.pid if self.process is not None else None

    @property
    def log_path(self) -> Path:
        """The service's own log; by default its output, :attr:`out_path`."""
        return self.out_path

    # --- what a subclass says about its service ------------------------------------------

    def ready(self) -> bool:
        """True once the service serves; :meth:`wait_ready` polls it. Default: once launched."""
        return True

    def describe(self) -> str:
        """Where it serves, for logs and ``status``, e.g. ``http://127.0.0.1:2379``."""
        return ", ".join(f"{role} {HOST}:{port}" for role, port in self.ports.items()) or str(
            self.dir
        )

    def log_files(self) -> list[Path]:
        """The files whose tails explain a failure: its log, then its output if apart."""
        return list(dict.fromkeys([self.log_path, self.out_path]))

    def run_files(self) -> list[Path]:
        """Files that exist only while it runs; stopping removes them."""
        return [self.pid_path]

    # --- lifecycle -------------------------------------------------------------------------

    def launch(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start ``argv`` in :attr:`dir` and return at once; see :meth:`start`.

        The process gets a session and so a process group of its own: a Ctrl-C meant for the
        caller does not reach it, and :meth:`stop` signals everything it starts. stdout and
        stderr go to :attr:`out_path` (truncated). Writes the pid and ports files. Raises
        :attr:`error` if the service already runs (from this object or, as its pid file says,
        from another process) or a port of it is taken.
        """
        live = self.running_pid()
        if live is not None:
            raise self.error(f"{self.label} from {self.dir} is already running (pid {live})")
        for port in self.ports.values():
            if not port_free(port):
                raise self.error(f"{self.label}: port {HOST}:{port} is already in use")
        self.dir.mkdir(parents=True, exist_ok=True)
        log.info("starting %s: %s", self.label, self.describe())
        with self.out_path.open("wb") as out:
            self.process = subprocess.Popen(
                list(argv),
                cwd=self.dir,  # also what marks the process as ours, see running_pid
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid_path.write_text(f"{self.process.pid}\n")
        self.ports_path.write_text(json.dumps(self.ports) + "\n")

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Self:
        """:meth:`launch` ``argv`` and :meth:`wait_ready`; on any failure stop it and re-raise."""
        started = time.monotonic()
        with stopped_on_failure(self):
            self.launch(argv, env)
            self.wait_ready(timeout)
        log.info("%s ready: %s (took %.1f s)", self.label, self.describe(), _since(started))
        return self

    def wait_ready(
        self,
        timeout: float | None = None,
        until: Callable[[], bool] | None = None,
        what: str = "become ready",
    ) -> float:
        """Poll ``until`` (default :meth:`ready`) for up to ``timeout`` seconds (default
        :attr:`ready_timeout`); see :func:`wait_all_ready`. Returns the seconds it took."""
        limit = self.ready_timeout if timeout is None else timeout
        return wait_all_ready([self], until or self.ready, limit, what)

    def check_running(self) -> None:
        """Raise :attr:`error`, with the log tails, if the launched process has exited.

        For polling loops: a service that fails exits rather than stalls, and the loop should
        fail at once with the reason instead of at its deadline.
        """
        if self.process is None:
            raise self.error(f"{self.label} was never launched")
        code = self.process.poll()
        if code is not None:
            raise self.error(f"{self.label} exited with code {code}; {self.log_tail()}")

    def is_running(self) -> bool:
        """True while the process this object launched has not exited."""
        return self.process is not None and self.process.poll() is None

    def running_pid(self) -> int | None:
        """This service's process group while any member of it runs, else None.

        The group is the launched process's if this object launched one, else the one the pid
        file names, so that another process can stop the service. A pid file whose group is
        gone, or whose pid now belongs to processes outside :attr:`dir`, names nothing.
        """
        pgid = self.pid if self.process is not None else read_pid(self.pid_path)
        if pgid is None:
            return None
        return pgid if any(self._runs_here(pid) for pid in group_pids(pgid)) else None

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the whole process group, SIGKILL it after ``timeout`` seconds (default
        :attr:`stop_timeout`), return once no member is left; remove the run files.

        Idempotent, and safe when nothing runs.
        """
        stop_all([self], timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group now (a crash, not a shutdown) and wait until it is
        gone; remove the run files. Raises :attr:`error` if it does not run."""
        pgid = self.running_pid()
        if pgid is None:
            raise self.error(f"{self.label} is not running")
        log.info("killing %s (pid %d)", self.label, pgid)
        signal_group(pgid, signal.SIGKILL)
        _wait_groups_gone([pgid], _KILL_WAIT_S, self.poll_interval)
        self._forget()

    def status(self) -> ServiceStatus:
        """Whether it runs (from this object or the pid file) and, if so, is ready."""
        pid = self.running_pid()
        return ServiceStatus(self.label, self.describe(), pid, pid is not None and self._ready())

    def log_tail(self) -> str:
        """The tails of :meth:`log_files`, for error messages."""
        return "\n".join(f"tail of {path}:\n{log_tail(path)}" for path in self.log_files())

    # --- internals -------------------------------------------------------------------------

    def _ready(self) -> bool:
        try:
            return self.ready()
        except ServiceError:
            return False

    def _runs_here(self, pid: int) -> bool:
        # Pids get reused: a process counts as this service's only if it runs inside the
        # service's dir (launch sets the cwd; Spark's drivers and executors run below the
        # worker's dir).
        if not Path("/proc/self").exists():
            return pid_alive(pid)  # no procfs (macOS): liveness is all we can check
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            return False
        return cwd.is_relative_to(self.dir)

    def _forget(self) -> None:
        if self.process is not None:
            # Reap it; a process stuck in the kernel even after SIGKILL is not worth a hang.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=1.0)
        for path in self.run_files():
            path.unlink(missing_ok=True)


def wait_all_ready(
    services: Sequence[LocalService], ready: Callable[[], bool], timeout: float, what: str
) -> float:
    """Poll ``ready`` until it returns True; return the seconds it took.

    Raises the first service's error, with the log tail of the one that exited, as soon as
    any of ``services`` exits, or after ``timeout`` seconds (then with the first's log tail).
    """
    started = time.monotonic()
    deadline = started + timeout
    poll = min(s.poll_interval for s in services)
    while True:
        for service in services:
            service.check_running()
        if ready():
            return _since(started)
        if time.monotonic() >= deadline:
            first = services[0]
            labels = ", ".join(s.label for s in services)
            raise first.error(f"{labels} did not {what} within {timeout:.0f} s; {first.log_tail()}")
        time.sleep(poll)


def stop_all(services: Sequence[LocalService], timeout: float | None = None) -> list[int]:
    """Stop every service as :meth:`LocalService.stop` does; return the groups signaled.

    All are signaled first and waited for after, so the shutdowns overlap instead of adding
    up. ``timeout`` defaults to the longest :attr:`~LocalService.stop_timeout` among them.
    """
    running = [(s, pgid) for s in services if (pgid := s.running_pid()) is not None]
    grace = max((s.stop_timeout for s in services), default=0.0) if timeout is None else timeout
    pgids = [pgid for _, pgid in running]
    for service, pgid in running:
        log.info("stopping %s (pid %d)", service.label, pgid)
        signal_group(pgid, signal.SIGTERM)
    poll = min((s.poll_interval for s in services), default=0.1)
    left = _wait_groups_gone(pgids, grace, poll)
    if left:
        log.warning("processes %s ignored SIGTERM for %.0f s; killing them", left, grace)
        for pgid in pgids:
            signal_group(pgid, signal.SIGKILL)
        left = _wait_groups_gone(pgids, _KILL_WAIT_S, poll)
        if left:
            log.error("processes %s survived SIGKILL", left)
    for service in services:
        service._forget()
    return pgids


def _wait_groups_gone(pgids: Sequence[int], timeout: float, poll: float) -> list[int]:
    """Poll until no member of ``pgids`` is alive; return the members alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pgid in pgids for pid in group_pids(pgid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll)


def _since(started: float) -> float:
    return time.monotonic() - started


# --- the command line ------------------------------------------------------------------------


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _the_port_option(args: argparse.Namespace) -> list[int] | None:
    port = getattr(args, "port", 0)
    return [port] if port else None


def _nothing_to_prepare(args: argparse.Namespace) -> None:
    pass


@dataclass(frozen=True)
class ServiceCli:
    """The command line every service module ends with (``python -m devservices.<name>``).

    ``up --dir DIR ...``
        Start the service in the background and wait until it is ready. If it already runs
        from DIR, say so instead: exit 0 if it is ready, 1 if not or if it serves on other
        ports than asked for (``asked_ports``).
    ``down --dir DIR``
        Stop what runs from DIR, found through its pid files; safe when nothing runs.
    ``status --dir DIR``
        One line per process; exit 0 only if every one runs and is ready.
    ``install`` (when the module has an ``install``)
        Put the service's binary in place (``make etcd`` and the like run this).

    ``module`` is the module's dotted name and ``doc`` its docstring, whose first line is the
    description. A module supplies ``recorded`` (the services whose files are in a dir,
    running or not), ``start`` (start from the parsed ``up`` arguments and return what it
    started) and optionally ``up_arguments``, ``install``, ``asked_ports`` (the first port
    of each process that the ``up`` arguments ask for, None for any; by default ``--port`` if
    given and not 0) and ``prepare`` (runs first in ``up``, e.g. a ``--fresh`` wipe).
    """

    module: str
    doc: str | None
    default_dir: Path
    recorded: Callable[[Path], Sequence[LocalService]]
    start: Callable[[argparse.Namespace], Sequence[LocalService]]
    up_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    install: Callable[[], Path] | None = None
    asked_ports: Callable[[argparse.Namespace], list[int] | None] = _the_port_option
    prepare: Callable[[argparse.Namespace], None] = _nothing_to_prepare

    def parser(self) -> argparse.ArgumentParser:
        description = (self.doc or "").strip().split("\n\n", 1)[0]
        parser = argparse.ArgumentParser(prog=f"python -m {self.module}", description=description)
        commands = parser.add_subparsers(dest="command", required=True)
        dir_help = f"the service's dir: pid files, ports, output (default: {self.default_dir})"

        up = commands.add_parser("up", help="start in the background and wait until ready")
        up.add_argument("--dir", type=Path, default=self.default_dir, help=dir_help)
        self.up_arguments(up)
        up.set_defaults(func=self._up)

        down = commands.add_parser("down", help="stop what runs from the dir")
        down.add_argument("--dir", type=Path, default=self.default_dir, help=dir_help)
        down.set_defaults(func=self._down)

        status = commands.add_parser("status", help="show what runs from the dir and answers")
        status.add_argument("--dir", type=Path, default=self.default_dir, help=dir_help)
        status.set_defaults(func=self._status)

        if self.install is not None:
            install = commands.add_parser("install", help="put its binary in place under var/")
            install.set_defaults(func=self._install)
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv``, log to stderr with timestamps, run the command; a
        :class:`ServiceError` is one line on stderr and exit status 1."""
        args = self.parser().parse_args(argv)
        logging.basicConfig(
            level=logging.INFO,
            stream=sys.stderr,
            format="%(asctime)s %(message)s",
            datefmt="%H:%M:%S",
        )
        try:
            return int(args.func(args))
        except ServiceError as e:
            log.error("%s", e)
            return 1

    def _up(self, args: argparse.Namespace) -> int:
        args.dir = args.dir.resolve()
        self.prepare(args)
        services = self.recorded(args.dir)
        if any(s.running_pid() is not None for s in services):
            asked = self.asked_ports(args)
            if asked is not None and [_first_port(s) for s in services] != asked:
                # Succeeding would hand the caller another service than it asked for.
                log.error(
                    "already running from %s on %s, not on ports %s; run `down` first",
                    args.dir,
                    ", ".join(s.describe() for s in services),
                    asked,
                )
                return 1
            statuses = [s.status() for s in services]
            for status in statuses:
                log.info("already running: %s", status)
            return 0 if all(s.ok for s in statuses) else 1
        for service in self.start(args):
            log.info(
                "%s up: %s (pid %s, output in %s)",
                service.label,
                service.describe(),
                service.pid,
                service.out_path,
            )
        return 0

    def _down(self, args: argparse.Namespace) -> int:
        dir: Path = args.dir.resolve()
        pgids = stop_all(self.recorded(dir))
        if pgids:
            log.info("stopped process groups %s from %s", pgids, dir)
        else:
            log.info("nothing running from %s", dir)
        return 0

    def _status(self, args: argparse.Namespace) -> int:
        dir: Path = args.dir.resolve()
        services = self.recorded(dir)
        if not services:
            print(f"nothing set up in {dir}")
            return 1
        statuses = [s.status() for s in services]
        for status in statuses:
            print(status)
        return 0 if all(s.ok for s in statuses) else 1

    def _install(self, args: argparse.Namespace) -> int:
        assert self.install is not None
        log.info("installed: %s", self.install())
        return 0


def _first_port(service: LocalService) -> int | None:
    return next(iter(service.ports.values()), None)
