# kubesage — the two commands a newcomer needs are `make run` and `make test`.
# Each target creates .venv on first use and installs what it needs (torch first,
# pinned, so pip takes the CPU build rather than a multi-GB CUDA one).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

FLINK_VENV := .venv-flink
FLINK_STAMP := $(FLINK_VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test test-fast lint bench services clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Flink gets a venv of its own: apache-flink pins numpy/pyarrow/pandas below what the
# project uses, and the adapter only speaks HTTP to it (its bin/ and lib/ ship in the wheel).
$(FLINK_STAMP):
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLINK_VENV)/bin/python -m pip install --quiet apache-flink==2.3.0
	touch $(FLINK_STAMP)

## services: install what the integration tests start themselves (Flink; Prometheus and
## node-exporter from Debian's packages). The tests run them on 127.0.0.1, free ports, temp dirs.
services: $(FLINK_STAMP)
	@if ! command -v prometheus >/dev/null || ! command -v prometheus-node-exporter >/dev/null; then \
	  $(SUDO) apt-get install -y -q prometheus prometheus-node-exporter \
	  || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q prometheus prometheus-node-exporter; }; \
	fi

## run: the whole control loop on a mixed workload (every variant, a sweep of the offered
## load; report in ./kubesage-report/scenario), then every packing policy on the embedded
## synthetic cluster (report in ./kubesage-report)
run: $(STAMP)
	$(BIN)/kubesage simulate --scenario mixed --sweep
	$(BIN)/kubesage simulate

## test: lint, type-check, then the whole test suite (slow tests included; what CI runs)
test: lint services
	$(BIN)/python -m pytest

## test-fast: the tests not marked slow (those over ~20 s), without lint, for iteration
test-fast: $(STAMP) services
	$(BIN)/python -m pytest -m "not slow"

## lint: ruff, the import-linter layer contracts (pyproject.toml), and mypy (mypy reads
## a strict editable install, restored afterwards)
lint: $(STAMP)
	$(BIN)/ruff check core adapters tests benchmarks
	$(BIN)/ruff format --check core adapters tests benchmarks
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pip install --quiet -e . --config-settings editable_mode=strict
	$(BIN)/mypy -p kubesage.core -p kubesage.adapters; status=$$?; \
	  $(BIN)/python -m pip install --quiet -e '.[dev]'; exit $$status

## bench: quality and speed tables beside their baselines (about four hours on 2 cores;
## the Flink ones start a real Flink cluster, which make services installs). Every script
## takes --tiny (or KUBESAGE_BENCH_TINY=1): seconds, figures meaningless; make test runs
## them so (tests/benchmarks).
bench: $(STAMP) services
	$(BIN)/python benchmarks/fgd_reproduction.py
	$(BIN)/python benchmarks/placement_speed.py
	$(BIN)/python benchmarks/forecast.py --quantiles 0.9,0.95
	$(BIN)/python benchmarks/forecast_gateway.py
	$(BIN)/python benchmarks/forecast_placement.py
	$(BIN)/python benchmarks/forecast_placement.py --learned stgcn,lstm,stgcn-q0.95
	$(BIN)/python benchmarks/forecast_refresh.py
	$(BIN)/python benchmarks/forecast_packing.py --sweep 0.9,0.95,0.98,0.99,0.995
	$(BIN)/python benchmarks/forecast_packing.py --train-until +8h --rolling 4 --sweep 0.9,0.95,0.98,0.99,0.995
	$(BIN)/python benchmarks/drtg.py
	$(BIN)/python benchmarks/allreduce.py
	$(BIN)/python benchmarks/elastic.py
	$(BIN)/python benchmarks/defrag.py
	$(BIN)/python benchmarks/spark_locality.py
	$(BIN)/python benchmarks/ppo.py
	$(BIN)/python benchmarks/openb_variants.py
	$(BIN)/python benchmarks/packing_bounds.py
	$(BIN)/python benchmarks/extender.py
	$(BIN)/python benchmarks/loop_scale.py
	$(BIN)/python benchmarks/soak.py
	$(BIN)/python benchmarks/flink_autoscale.py
	$(BIN)/python benchmarks/flink_autoscale.py --scenario ramp --repeats 3
	$(BIN)/python benchmarks/flink_stagger.py

clean:
	rm -rf $(VENV) $(FLINK_VENV) build kubesage-report kubesage.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
