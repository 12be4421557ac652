# Spark-native Kafka audit suite. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
SITE        := $(VENV)/lib/python3.11/site-packages
# The build's own short JVMs (Maven, javac) compile with C1 only: C2's work on a run of seconds
# is CPU that setup waits for (the same flag as core.paths.C1_ONLY_JIT).
BUILD_JIT   := -XX:TieredStopAtLevel=1
MVN         := MAVEN_OPTS="$$MAVEN_OPTS $(BUILD_JIT)" mvn -q -B -f jvm/pom.xml
PROTOS      := $(shell find proto -name '*.proto' -not -path 'proto/third_party/*')
THIRD_PARTY_PROTOS := $(wildcard proto/third_party/*.proto)
PYTEST_ARGS ?=
BENCH_ARGS ?=
# `make test` runs its test files on this many pytest-xdist workers (one file stays on one
# worker, so module fixtures are built once). Each worker has its own brokers and SparkSession.
# Two left the cores idle a fifth of the time; three keep them about 93 % busy and finish
# sooner (docs/testing.md, "Fixtures and real services"; the runs in docs/benchmarks.md,
# "Test suite"). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3

.PHONY: help setup venv jars proto build etcd kafka-pixy burrow prometheus chromium airflow-venv airflow-provider wheel kafka-up kafka-down run demo-audit-tiers controlplane report test test-unit airflow-test lint format bench-audit bench-replication bench-controlplane bench-loadgen clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-20s %s\n", $$1, $$2}'

# One make over the whole graph, three recipes at a time: the project's JVM build (jars, javac,
# the class-data sharing archive) is one chain of CPU-bound steps, and beside it run the Airflow
# venv, the dev services' downloads and the wheels, which mostly wait on the disk and the
# network. Each recipe's lines stay whole (--output-sync=line) and name their step.
SETUP_JOBS ?= 3

setup: ## install everything: Python venv, JVM jars, generated protos, job zip, etcd, kafka-pixy, Burrow, Prometheus, Chromium, the Airflow venv
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) --output-sync=line venv jars proto build etcd kafka-pixy burrow prometheus chromium airflow-venv airflow-provider

venv: $(VENV)/.installed ## Python virtual environment with the pinned dependencies

$(VENV)/.installed: pyproject.toml
	@echo ">> creating $(VENV) and installing the pinned Python dependencies"
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print("\n".join(p["dependencies"] + x["spark"] + x["dev"]))' > $(VENV)/requirements.txt
	@# Not --no-compile: pip's bytecode is the only one there is where PYTHONDONTWRITEBYTECODE is
	@# set (as on CI), and without it every Python process compiles what it imports.
	$(PY) -m pip install -q -r $(VENV)/requirements.txt
	@# The repo root and the generated protos are importable from the venv without an install step.
	printf '%s\n%s\n' "$(CURDIR)" "$(CURDIR)/build/gen" > $(SITE)/uatu-local.pth
	touch $@

jars: var/jars/.installed ## Spark Kafka connector, Delta, the Kafka broker and Kafka 4.1 clients from Maven Central

# var/ may be shared by several checkouts whose tests run at the same time: the jars are resolved
# into a staging folder and a folder is replaced only if its contents changed, so a pom edit
# that does not touch a profile never takes its jars away from a running test. Maven needs no
# Python, so it resolves while pip fills the venv; pruning needs pyspark's jars, so it waits.
# The staging marker is secondary: once the jars are installed, its absence rebuilds nothing.
.SECONDARY: var/jars/.staging/.resolved
var/jars/.staging/.resolved: jvm/pom.xml
	@echo ">> resolving JVM artifacts from Maven Central (jvm/pom.xml)"
	rm -rf var/jars/.staging
	$(MVN) -P spark-jars dependency:copy-dependencies -Dout.dir=$(CURDIR)/var/jars/.staging
	$(MVN) -P kafka dependency:copy-dependencies -Dout.dir=$(CURDIR)/var/jars/.staging
	$(MVN) -P grpc-jars dependency:copy-dependencies -Dout.dir=$(CURDIR)/var/jars/.staging
	$(MVN) -P kafka4-clients dependency:copy-dependencies -Dout.dir=$(CURDIR)/var/jars/.staging
	touch $@

var/jars/.installed: var/jars/.staging/.resolved | $(VENV)/.installed
	@# pyspark ships Spark, Hadoop, Jackson, Scala, Guava and Gson; keep only what it lacks.
	$(PY) -m dev.prune_jars var/jars/.staging/spark $(SITE)/pyspark/jars
	$(PY) -m dev.prune_jars var/jars/.staging/grpc $(SITE)/pyspark/jars
	for d in spark kafka grpc kafka4; do \
	  if ! diff -rq var/jars/.staging/$$d var/jars/$$d >/dev/null 2>&1; then \
	    rm -rf var/jars/$$d && mv var/jars/.staging/$$d var/jars/$$d; fi; done
	rm -rf var/jars/.staging
	touch $@

proto: build/gen/.generated ## generate Python code from proto/ (never edit it by hand)

build/gen/.generated: $(PROTOS) $(THIRD_PARTY_PROTOS) $(VENV)/.installed
	@echo ">> generating protobuf and gRPC stubs into build/gen"
	rm -rf build/gen && mkdir -p build/gen
	$(PY) -m grpc_tools.protoc -I proto --python_out=build/gen --pyi_out=build/gen --grpc_python_out=build/gen $(PROTOS)
	@# Vendored IDL keeps its upstream import path (top-level kafkapixy_pb2).
	$(PY) -m grpc_tools.protoc -I proto/third_party --python_out=build/gen --pyi_out=build/gen --grpc_python_out=build/gen $(THIRD_PARTY_PROTOS)
	@# Regular packages (not namespace ones) so the generated code imports from a zip too.
	find build/gen -type d -exec touch {}/__init__.py \;
	touch $@

build: build/uatu-jobs.zip build/uatu-jvm.jar build/spark-cds.jsa build/native/libuatu_audit.so ## job zip (jobs/, generated protos) for --py-files, the project's jar, the drivers' class-data sharing archive, the audit clients' librdkafka plugin

# The project's own Java (the replication sink, the dispatcher), compiled against the exact jars
# Spark runs with: pyspark's and those `make jars` fetched. Nothing to resolve, so no Maven
# build. The dispatcher's grpc-java jars (var/jars/grpc) are folded into the project's jar, so
# spark-submit.sh and the test sessions ship one jar as before (grpc-java's Netty is shaded, and
# Spark ships no io.grpc classes).
JAVA_SOURCES := $(shell find jvm/src -name '*.java')
build/uatu-jvm.jar: $(JAVA_SOURCES) var/jars/.installed
	@echo ">> compiling jvm/src into $@"
	rm -rf build/jvm-classes && mkdir -p build/jvm-classes
	javac -J$(BUILD_JIT) -d build/jvm-classes --release 17 -Xlint:all,-path -Werror -cp '$(SITE)/pyspark/jars/*:var/jars/spark/*:var/jars/grpc/*' $(JAVA_SOURCES)
	$(PY) -m dev.fold_jars build/jvm-classes var/jars/grpc/*.jar
	jar --create --file $@ -C build/jvm-classes .

# A JVM class-data sharing archive of the classes a driver loads before its first batch,
# recorded by a training run (dev/cds_archive.py, about a minute): spark-submit.sh and the test
# suite's JVMs map it instead of loading those classes again. It is tied to the JDK and the
# classpath, so it is recorded again whenever the venv or the jars change.
build/spark-cds.jsa: build/uatu-jvm.jar var/jars/.installed $(VENV)/.installed dev/cds_archive.py jobs/runtime/session.py
	$(PY) -m dev.cds_archive $@

# The audit clients' librdkafka interceptor plugin (Rust; clients/audit_interceptor), built into
# build/cargo with crates from cargo's default registry. Cargo.toml pins both dependencies
# exactly, and neither has dependencies of its own, so no lock file is kept.
NATIVE_SOURCES := $(shell find clients/audit_interceptor/src -name '*.rs') clients/audit_interceptor/Cargo.toml
CARGO := cargo --quiet
CARGO_ARGS := --release --manifest-path clients/audit_interceptor/Cargo.toml --target-dir build/cargo
build/native/libuatu_audit.so: $(NATIVE_SOURCES)
	@echo ">> building the audit clients' librdkafka plugin (cargo, clients/audit_interceptor)"
	$(CARGO) build $(CARGO_ARGS)
	mkdir -p build/native && cp build/cargo/release/libuatu_audit.so $@

build/uatu-jobs.zip: build/gen/.generated $(shell find jobs core -name '*.py')
	$(PY) -m dev.pyfiles_zip $@ .:jobs .:core build/gen:uber build/gen:uatu build/gen:kafkapixy_pb2.py build/gen:kafkapixy_pb2_grpc.py

etcd: var/etcd/bin/etcd ## etcd binary from Debian's etcd-server .deb into var/etcd/bin (no system install)

var/etcd/bin/etcd: | $(VENV)/.installed
	@echo ">> fetching etcd (apt-get download etcd-server, unpacked into var/etcd)"
	$(PY) -m devservices.etcd install

kafka-pixy: var/kafka-pixy/bin/kafka-pixy ## kafka-pixy (gRPC proxy for Kafka) built from source with Go into var/kafka-pixy/bin

var/kafka-pixy/bin/kafka-pixy: | $(VENV)/.installed
	@echo ">> building kafka-pixy (go mod download + go build -p 1, into var/kafka-pixy)"
	$(PY) -m devservices.kafka_pixy install

burrow: var/burrow/bin/burrow ## LinkedIn Burrow 1.2.1 from Debian's burrow .deb into var/burrow/bin (side-by-side lag tests)

var/burrow/bin/burrow: | $(VENV)/.installed
	@echo ">> fetching Burrow (apt-get download burrow, unpacked into var/burrow)"
	$(PY) -m devservices.burrow install

prometheus: var/prometheus/bin/promtool ## Prometheus 2.42 and promtool from Debian's prometheus .deb into var/prometheus/bin (metrics and alert-rule tests)

var/prometheus/bin/promtool: | $(VENV)/.installed
	@echo ">> fetching Prometheus (apt-get download prometheus, unpacked into var/prometheus)"
	$(PY) -m devservices.prometheus install

chromium: var/chromium/usr/lib/chromium/chromium-headless-shell ## headless Chromium from Debian's .debs (+ the libraries it lacks) into var/chromium (report test)

var/chromium/usr/lib/chromium/chromium-headless-shell: | $(VENV)/.installed
	@echo ">> fetching chromium-headless-shell and its missing libraries (apt-get download, unpacked into var/chromium)"
	$(PY) -m devservices.chromium install

# The Python side as wheels: uatu-spark (the generated protos in build/gen included; its base
# install is the client side, `[spark]` the rest) and the Airflow provider, into build/dist.
WHEEL_DIR    := build/dist
AIRFLOW_DIR  := integrations/airflow
AIRFLOW_VENV := $(AIRFLOW_DIR)/.venv
WHEEL_SOURCES := $(shell git ls-files core jobs controlplane integrations clients 2>/dev/null | grep '\.py$$')

wheel: $(WHEEL_DIR)/.built ## the wheels: uatu-spark and airflow-provider-uatu, into build/dist

$(WHEEL_DIR)/.built: build/gen/.generated pyproject.toml $(AIRFLOW_DIR)/pyproject.toml $(WHEEL_SOURCES)
	@echo ">> building the wheels into $(WHEEL_DIR)"
	rm -rf $(WHEEL_DIR) build/lib build/bdist.* && mkdir -p $(WHEEL_DIR)
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w $(WHEEL_DIR) . ./$(AIRFLOW_DIR)
	rm -rf build/lib build/bdist.* build/gen/*.egg-info *.egg-info $(AIRFLOW_DIR)/build $(AIRFLOW_DIR)/*.egg-info
	touch $@

# Airflow never shares a venv with pyspark: its own venv, pinned by a committed constraints file
# (resolved once and frozen; see docs/airflow.md). The provider and the uatu-spark client are
# installed from their wheels (airflow-provider), as on any Airflow: nothing from the checkout.
AIRFLOW_PY   := $(AIRFLOW_VENV)/bin/python

airflow-venv: $(AIRFLOW_VENV)/.installed ## Airflow 3 in its own venv (integrations/airflow/.venv), pinned

$(AIRFLOW_VENV)/.installed: $(AIRFLOW_DIR)/constraints.txt
	@echo ">> creating $(AIRFLOW_VENV): apache-airflow and what the provider needs, pinned by $(AIRFLOW_DIR)/constraints.txt"
	test -x $(AIRFLOW_PY) || $(PYTHON_BOOT) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_PY) -m pip install -q -r $(AIRFLOW_DIR)/constraints.txt
	touch $@

airflow-provider: $(AIRFLOW_VENV)/.provider ## install the provider's and uatu-spark's wheels into the Airflow venv

$(AIRFLOW_VENV)/.provider: $(AIRFLOW_VENV)/.installed $(WHEEL_DIR)/.built
	@echo ">> installing the provider and uatu-spark wheels into $(AIRFLOW_VENV)"
	rm -f $$($(AIRFLOW_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/uatu-local.pth
	$(AIRFLOW_PY) -m pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/*.whl
	$(AIRFLOW_PY) -m pip check
	touch $@

kafka-up: setup ## start a local KRaft broker on 127.0.0.1:9092 (data in var/kafka)
	$(PY) -m devservices.kafka up --dir var/kafka --port 9092

kafka-down: ## stop the broker started by kafka-up
	$(PY) -m devservices.kafka down --dir var/kafka

DEMO_NEEDS := venv jars proto build/uatu-jobs.zip build/uatu-jvm.jar build/spark-cds.jsa

run: $(DEMO_NEEDS) ## demo: own broker, demo stream from the load generator, audit job once (--once), print audit_counts; sets up only what it needs
	$(PY) -m examples.demo

demo-audit-tiers: setup ## demo: a Python and a Java service reporting to the cross-tier audit, a replicated copy broken on purpose, the verdicts per window
	$(PY) -m examples.audit_tiers_demo

controlplane: setup ## run the control plane (gRPC admin API) on 127.0.0.1:8087, store in var/, admin token in var/controlplane/admin.token
	$(PY) -m controlplane serve --address 127.0.0.1:8087 --admin-token-file var/controlplane/admin.token

report: venv ## completeness report from the Delta tables: WAREHOUSE=var/demo/warehouse OUT=report.html
	$(PY) -m integrations.report --warehouse $(or $(WAREHOUSE),var/demo/warehouse) --out $(or $(OUT),report.html)

test: setup ## run the whole test suite (unit and integration, the Airflow test included)
	$(PY) -m pytest --durations=20 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)
	$(CARGO) test $(CARGO_ARGS)

airflow-test: setup ## the Airflow test: airflow db migrate, dag.test() of the example DAG against a real broker and job
	$(PY) -m pytest tests/integrations/test_airflow.py $(PYTEST_ARGS)

test-unit: venv proto ## only the fast tests: no JVM, jars, broker or other services (and the plugin's Rust tests)
	$(PY) -m pytest -m "not integration and not spark" $(PYTEST_ARGS)
	$(CARGO) test $(CARGO_ARGS)

lint: setup ## ruff lint + format check, mypy; rustfmt and clippy on the plugin
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cargo fmt --check --manifest-path clients/audit_interceptor/Cargo.toml
	$(CARGO) clippy $(CARGO_ARGS) -- -D warnings

format: venv ## apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench-audit: setup ## benchmark: audit job vs kafka-consumer-perf-test on 5M records
	$(PY) -m bench.audit_bench $(BENCH_ARGS)

.PHONY: bench-fleet
bench-fleet: setup ## benchmark: one pattern audit over 1,000 topics vs one application per topic (BENCH_ARGS="--quick": 20 topics)
	$(PY) -m bench.fleet_bench $(BENCH_ARGS)

.PHONY: bench-fleet-pool
bench-fleet-pool: setup grpc-sink ## benchmark: 200 JobGroups (audits, replications, dispatchers) on 4 worker applications vs one application per group (BENCH_ARGS="--quick": 14 groups on 2)
	$(PY) -m bench.fleet_pool $(BENCH_ARGS)

.PHONY: bench-pack-merge
bench-pack-merge: setup ## benchmark: an audit pack's counts MERGE of 75 groups vs one group's, alone on the machine
	$(PY) -m bench.pack_merge $(BENCH_ARGS)

bench-replication: setup ## benchmark: replication job vs MirrorMaker 2 and Kafka's perf tools on 1M records
	$(PY) -m bench.replication_bench $(BENCH_ARGS)

bench-loadgen: setup ## benchmark: LOAD_GEN_PRODUCE / _CONSUME vs Kafka's perf tools; JSON into docs/benchmarks/
	$(PY) -m bench.loadgen_bench $(BENCH_ARGS)

bench-controlplane: setup ## benchmark: list 10k JobGroups, reconcile 1k, AddJobGroup vs spark-submit.sh
	$(PY) -m bench.controlplane_bench $(BENCH_ARGS)

.PHONY: bench-startup
bench-startup: setup ## benchmark: a job type's launch to its first output (BENCH_ARGS="--job audit|availability|loadgen|dispatch", default replication), and where the start-up goes
	$(PY) -m bench.startup_bench $(BENCH_ARGS)

.PHONY: bench-suite
bench-suite: setup ## where the test suite's CPU goes, by kind of process and by test: make test under bench.suite_cpu; JSON into docs/benchmarks/
	$(PY) -m bench.suite_cpu --test-cpu-dir $$(mktemp -d) --out docs/benchmarks/suite-cpu-$$(date -u +%Y%m%dT%H%M%SZ)-$$(git rev-parse --short HEAD).json -- $(MAKE) --no-print-directory test

.PHONY: grpc-sink demo-dispatch bench-dispatch
grpc-sink: var/grpc-sink/bin/grpc-sink ## the Go gRPC sink and ghz (the dispatcher benchmark's service and load tool), built with Go into var/grpc-sink/bin

var/grpc-sink/bin/grpc-sink: devservices/grpc_sink/main.go devservices/grpc_sink/go.mod devservices/grpc_sink/go.sum | $(VENV)/.installed
	@echo ">> building the gRPC sink and ghz (go build -p 1; modules from go env GOPROXY)"
	$(PY) -m devservices.grpc_sink install

demo-dispatch: setup ## demo: own broker, a sample consumer service, the dispatcher job once, where every record went
	$(PY) -m examples.dispatch_demo

bench-dispatch: setup grpc-sink ## benchmark: dispatcher job vs a hand-written dispatcher and the sink's ceiling (ghz), 1M records
	$(PY) -m bench.dispatch_bench $(BENCH_ARGS)

.PHONY: bench-audit-tiers
bench-audit-tiers: setup ## benchmark: cross-tier audit, window end -> LOSS verdict (1-minute windows), then the audit clients' overhead on producer throughput
	$(PY) -m bench.audit_tiers_bench $(BENCH_ARGS)
	$(PY) -m bench.audit_clients_bench

.PHONY: bench-availability
bench-availability: setup ## benchmark: availability job, broker kill -> probe row (3 brokers), lag evaluator commits/s vs Burrow (BENCH_ARGS="--only throughput": part 2 only)
	$(PY) -m bench.availability_bench $(BENCH_ARGS)

clean: ## remove build output and local data (keeps the venv and the jars)
	rm -rf build var/warehouse var/checkpoints var/kafka var/demo
