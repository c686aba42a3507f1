# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BB := $(VENV)/bin/blackbox
PY_STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
BENCH_STAMP := $(VENV)/.installed-bench
NODE_STAMP := node_modules/.installed

.PHONY: demo test suite lint typecheck format bench setup services clean

# Bytecode caches are written even where the environment asks not to (PYTHONDONTWRITEBYTECODE):
# without them every process of the suite compiles the project again, and pytest rewrites the
# asserts of every test module again in each worker (about 5 s of CPU per worker at collection).
unexport PYTHONDONTWRITEBYTECODE

$(PY_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(DEMO_STAMP) $@

# The demo needs the package alone (its server and client come with the `mcp` dependency): no
# test tools, no npm, no browser.
$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $@

# The benchmarks also draw charts (bench/scale.py's curves): the `bench` extra, for them alone.
$(BENCH_STAMP): $(PY_STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	touch $@

$(NODE_STAMP): package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

# Headless Chromium checks the HTML report (Debian's package; the machines run as root).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

setup: $(PY_STAMP) $(NODE_STAMP) $(CHROMIUM)

# The PostgreSQL tests must run: start the local cluster when it is installed but stopped.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || { \
	  command -v pg_ctlcluster >/dev/null && \
	  pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | head -n 1) main start && \
	  sleep 2; } || true

demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

lint: $(PY_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy over the package as installed (tools/typecheck.py says why it lays the package out first).
typecheck: $(PY_STAMP)
	$(PY) tools/typecheck.py

format: $(PY_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Three workers on two cores: most tests wait on servers and subprocesses, not on the CPU
# (measured: 279 s against 565 s in one process). Each worker has its own PostgreSQL database,
# temp directories and ports picked free. The downloads (PyPI, npm, apt) run side by side; mypy,
# which keeps one core busy for about 15 s, runs beside the suite rather than before it.
test:
	@$(MAKE) --no-print-directory -j3 setup services lint
	@$(MAKE) --no-print-directory -j2 typecheck suite

suite: $(PY_STAMP)
	$(PY) -m pytest -n 3 --dist worksteal

bench: setup $(BENCH_STAMP)
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) node_modules .pytest_cache .ruff_cache
