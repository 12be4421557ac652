"""Entry point of every job: `spark-submit ... jobs/main.py JOBGROUP.json [--once]
[--skip-lost-records]`, of the tables' upkeep: `... jobs/main.py maintain`
(jobs/maintenance.py), and of a worker application that runs the JobGroups the control plane
assigns to it: `... jobs/main.py worker` (jobs/worker/).

Loads the site configuration and the JobGroup, validates both (`registry.validate`), checks
that the source topic exists, then runs the JobType's `StreamingJob` (`load_runtime()`).
Exit status: 0 finished (or stopped by SIGTERM), 1 failed while running, 2 bad input
(nothing was started or written; one line on stderr names the field and the value).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from core import faults
from core.config import add_conf_dir_argument, load_settings
from core.errors import ConfigError, UatuError
from core.jobgroup import load_jobgroup
from jobs import registry
from jobs.prepare import SOURCE_CLUSTER_WAIT_S, build_job, check_source
from jobs.runtime.progress import JobIdentity
from jobs.runtime.reporting import ReporterConfig, Reporting

log = logging.getLogger("uatu.main")


CHECK_WAIT_S = 5.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 3600]")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="spark-submit.sh",
        description="Run one uForwarder-style JobGroup as a Spark Structured Streaming job.",
    )
    parser.add_argument("jobgroup", type=Path, help="JobGroup JSON file (protobuf JSON mapping)")
    parser.add_argument(
        "--once",
        action="store_true",
        help="bounded run: process everything available now, write the results, exit 0",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate the JobGroup and the source topic, then exit without starting Spark",
    )
    parser.add_argument(
        "--check-timeout",
        type=_seconds,
        default=CHECK_WAIT_S,
        metavar="SECONDS",
        help="with --check: how long to wait for the source cluster's brokers to answer "
        f"before giving up, exit 1 (default {CHECK_WAIT_S:g})",
    )
    parser.add_argument(
        "--skip-lost-records",
        action="store_true",
        help="records of the source deleted before the job read them (the run failed on them, "
        "exit 1): record them in source_data_loss and go on past them, on the same checkpoint, "
        "for this run only; any other loss still fails it (docs/operations.md)",
    )
    add_conf_dir_argument(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["maintain"]:  # spark-submit.sh maintain ...: the warehouse's upkeep
        from jobs import maintenance

        return maintenance.main(argv[1:])
    if argv[:1] == ["worker"]:  # spark-submit.sh worker ...: an application of many JobGroups
        from jobs.worker import main as worker

        return worker.main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # py4j logs every callback at INFO; the job's own progress lines are what users read.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        settings = load_settings(args.conf_dir)
        group = load_jobgroup(args.jobgroup)
        job_type, spec = registry.validate(group, settings)
        reporter_config = ReporterConfig.from_env(os.environ)
        faults.for_job(os.environ, job_type.name)  # a bad or unreachable UATU_FAULT: exit 2
        job = build_job(group, settings)
        if args.skip_lost_records and not job.skips_lost_records:
            raise ConfigError(
                "--skip-lost-records",
                f"{job_type.name} ({type(job).__name__}) does not skip lost source records; "
                "the counting audit, the replication and the dispatcher do",
            )
        source = spec.required_topic()
        wait_s = args.check_timeout if args.check else SOURCE_CLUSTER_WAIT_S
        check_source(job, group, settings, wait_s)
        if args.check:
            job.check()
            return 0
        reporting = None
        if reporter_config is not None:
            consumer_group = group.kafka_consumer_task_group.consumer_group
            identity = JobIdentity(group.type, source.cluster, source.topic, consumer_group)
            reporting = Reporting(reporter_config, identity)
            log.info("reporting to the control plane at %s", ",".join(reporter_config.addresses))
        stop_file = os.environ.get("UATU_STOP_FILE")
        return job.run(
            once=args.once,
            stop_file=stop_file,
            reporting=reporting,
            skip_lost_records=args.skip_lost_records,
        )
    except UatuError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status


if __name__ == "__main__":
    sys.exit(main())
