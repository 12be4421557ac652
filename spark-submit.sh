#!/usr/bin/env bash
# Run one JobGroup as a Spark application. This is the interface schedulers, Airflow and the
# control plane call.
#
#   ./spark-submit.sh JOBGROUP.json [--once] [--check] [--skip-lost-records] [--conf-dir DIR]
#   ./spark-submit.sh maintain [--table PATH] [--vacuum-retention-hours H]   (compact and vacuum
#       the warehouse's Delta tables: docs/operations.md, "Shared tables")
#   ./spark-submit.sh worker [--conf-dir DIR]   (a worker application: runs the JobGroups the
#       control plane assigns to it, each as its own query; docs/controlplane.md, "Worker pool")
#
# --skip-lost-records: go on past source records deleted before the job read them, on the same
# checkpoint, for this run only (docs/operations.md, "Past a retention gap").
#
# Environment (docs/operations.md lists every variable a job reads):
#   SPARK_MASTER             Spark master URL (default local[2]; a worker application's
#                            local[N], N twice the cores and at least 4)
#   UATU_DRIVER_MEMORY       driver memory (default 2g)
#   UATU_SPARK_SUBMIT_ARGS   extra spark-submit arguments, e.g. "--conf spark.sql.shuffle.partitions=4"
#   UATU_CONF_DIR, UATU_WAREHOUSE, UATU_CHECKPOINTS   see conf/uatu.yaml
#   UATU_STOP_FILE           path whose creation stops the job gracefully (default: a temp path)
#   UATU_CONTROL_PLANE       host:port[,host:port] of the control plane to heartbeat to (optional)
#   UATU_WORKER_ID           worker id the control plane reserved for this application
#   UATU_HEARTBEAT_SECONDS   heartbeat interval (default 5)
#   UATU_WORKER_FENCE_SECONDS  a worker stops its queries after this long without an answered
#                            heartbeat (default 30; the control plane's pool sets it)
#   UATU_CDS                 0 starts the driver without the class-data sharing archive
#   UATU_VENV                the virtualenv whose spark-submit and Python run (default .venv)
#
# Exit status: 0 done (or stopped by SIGTERM/SIGINT), 1 failed while running (also: a cluster
# that does not answer), 2 bad input (nothing started; one line names the field and value).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${UATU_VENV:-$ROOT/.venv}"
PY_FILES="$ROOT/build/uatu-jobs.zip"
JAR_DIR="$ROOT/var/jars/spark"

if [[ ! -x "$VENV/bin/spark-submit" || ! -f "$PY_FILES" || ! -d "$JAR_DIR" || ! -f "$ROOT/build/uatu-jvm.jar" ]]; then
  echo "error: the project is not built; run 'make setup' in $ROOT first" >&2
  exit 2
fi
# The executors run the job code from the zip, the driver's entry from the checkout: code
# edited since the last build would run half old, half new.
STALE="$(find "$ROOT/jobs" "$ROOT/core" -name '*.py' -newer "$PY_FILES" -print -quit 2>/dev/null || true)"
if [[ -n "$STALE" ]]; then
  echo "warning: ${STALE#"$ROOT"/} is newer than build/uatu-jobs.zip; run 'make build' to run the code as it is now" >&2
fi

# Help and validation need no JVM: answer them from Python directly, in a second.
for arg in "$@"; do
  case "$arg" in
    -h|--help|--check) UATU_CONF_DIR="${UATU_CONF_DIR:-$ROOT/conf}" PYTHONPATH="$PY_FILES" exec "$VENV/bin/python" "$ROOT/jobs/main.py" "$@" ;;
  esac
done

export UATU_CONF_DIR="${UATU_CONF_DIR:-$ROOT/conf}"
export UATU_LAUNCHED_AT="${UATU_LAUNCHED_AT:-$(date +%s.%N)}"  # the job's start-up line counts from here
JARS="$(find "$JAR_DIR" "$ROOT/build/uatu-jvm.jar" -name '*.jar' | sort | paste -sd, -)"
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"

# Class-data sharing: the driver JVM maps the Spark, Scala and Delta classes `make build`
# archived (dev/cds_archive.py) instead of loading and verifying them again, which shortens
# every start-up. A stale archive (a new JDK or pyspark) is skipped with one warning on stderr.
CDS_ARCHIVE="$ROOT/build/spark-cds.jsa"
if [[ -f "$CDS_ARCHIVE" && "${UATU_CDS:-1}" != 0 ]]; then
  export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-} -XX:SharedArchiveFile=$CDS_ARCHIVE -Xshare:auto -Xlog:cds*=warning:stderr -Xlog:cds*=off:stdout"
fi

# A worker application runs many groups' queries, whose tasks mostly wait on Kafka and on
# Delta commits, and its after-commit writes pool is served first up to two task slots
# (jobs/worker/main.py, WRITES_POOL_MIN_SHARE). On local[2] those writes could hold both slots
# while the queries' batches waited for one; locally a worker gets twice the cores, at least 4.
if [[ "${1:-}" == worker ]]; then
  cores=$(nproc)
  DEFAULT_MASTER="local[$(( cores * 2 > 4 ? cores * 2 : 4 ))]"
else
  DEFAULT_MASTER="local[2]"
fi
MASTER="${SPARK_MASTER:-$DEFAULT_MASTER}"

# Hardened by default (docs/security.md): the UI cannot kill jobs or stages, and in local
# mode the driver, its block manager and the UI listen on loopback only. On a cluster the
# driver must be reachable by executors: bind it there with UATU_SPARK_SUBMIT_ARGS, and turn
# on spark.authenticate and spark.network.crypto.enabled.
HARDENING=(--conf spark.ui.killEnabled=false)
if [[ "$MASTER" == local* ]]; then
  export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
  HARDENING+=(--conf spark.driver.bindAddress=127.0.0.1 --conf spark.driver.host=127.0.0.1)
fi

# Graceful stop: SIGTERM or SIGINT to this script creates the stop file, which the job polls
# every 2 s; it then stops its query and exits 0. (A signal to the whole process
# group also kills the driver JVM at once: safe, every write is exactly-once, but not clean.)
export UATU_STOP_FILE="${UATU_STOP_FILE:-$(mktemp -u "${TMPDIR:-/tmp}/uatu-stop.XXXXXX")}"
rm -f "$UATU_STOP_FILE"
trap 'touch "$UATU_STOP_FILE"' TERM INT

# shellcheck disable=SC2086  # UATU_SPARK_SUBMIT_ARGS is a list of words on purpose
"$VENV/bin/spark-submit" \
  --master "$MASTER" \
  "${HARDENING[@]}" \
  --driver-memory "${UATU_DRIVER_MEMORY:-2g}" \
  --jars "$JARS" \
  --py-files "$PY_FILES" \
  --driver-java-options "-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties" \
  ${UATU_SPARK_SUBMIT_ARGS:-} \
  "$ROOT/jobs/main.py" "$@" &
child=$!
# `wait` returns early when a trapped signal arrives; keep waiting for the job itself.
status=0
while kill -0 "$child" 2>/dev/null; do
  wait "$child" && status=0 || status=$?
done
rm -f "$UATU_STOP_FILE"
exit "$status"
