# Every target installs what it needs into .venv first; nothing relies on a shell's history.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Many small matrices: one BLAS thread is far faster than a pool (see robotctl/agent/cli.py).
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: demo test bench lint clean servers scrapy-demo scrapy-compare deploy-check
# root installs system packages directly; anyone else through sudo
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "setuptools>=68" wheel
	$(BIN)/pip install --quiet -e '.[test,lint,scrapy,reports,warc]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/robotctl demo

# Scrapy crawls the demo site under robotctl's control (examples/scrapy_demo/).
scrapy-demo: $(STAMP)
	cd examples/scrapy_demo && $(CURDIR)/$(BIN)/python run.py

# Scrapy with AutoThrottle, with fixed concurrencies and under robotctl, same site, seed and duration
scrapy-compare: $(STAMP)
	$(BIN)/python bench/scrapy_compare.py

# Debian's prometheus (promtool and the server) for the server tests of tests/agent/test_deploy.py, and
# Debian's redis-server for the scrapy-redis fleet of tests/scrapy/test_redis_fleet.py (the test starts its own
# on a free port). A failed install fails `make test`, so those tests never skip unnoticed in CI.
servers:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus (for the server tests)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing Debian's redis-server (for the scrapy-redis fleet test)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }

# pytest's own script, not `python -m pytest`: the repository root must not be on sys.path, so that
# only the installed layout (robotctl.model, ...) is importable, as for a user.
test: $(STAMP) servers
	$(BIN)/pytest -q

# deploy/ validated offline: the manifests in deploy/README.md's order against Kubernetes' schemas
# (kubernetes-validate) and KEDA's CRD, the agent started with the manifest's configuration and a token
# made as documented, the dashboard's and the rules' metric names against a live agent's /metrics, and
# with Debian's promtool (installed by `make servers`; skipped with a note when absent) the Prometheus
# configuration, the rules and their unit tests. prometheus-kubernetes.yml is not checked: Debian's build
# has no Kubernetes discovery (deploy/README.md).
deploy-check: $(STAMP)
	$(BIN)/kubernetes-validate --strict --quiet -k 1.30.0 deploy/kubernetes/*.yaml
	$(BIN)/pytest -q -m "not server" tests/agent/test_deploy.py
	@if command -v promtool >/dev/null 2>&1; then \
	  promtool check config deploy/prometheus/prometheus.yml && \
	  promtool check rules deploy/prometheus/rules.yml && \
	  promtool test rules deploy/prometheus/rules_test.yml; \
	else echo "promtool not installed (make servers installs it): Prometheus files not checked"; fi

bench: $(STAMP)
	for f in bench/[!_]*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done  # bench/_*.py: helpers they run

# ruff, mypy and import-linter read the source tree itself: every robotctl.X is the folder robotctl/X.
# The layer contracts are in pyproject.toml; tools/check_seams.py fails on an import of another package's
# private module (robotctl.X._private from outside robotctl.X).
lint: $(STAMP)
	$(BIN)/ruff check robotctl bench tests examples tools
	$(BIN)/mypy --config-file pyproject.toml -p robotctl
	$(BIN)/lint-imports --no-cache --config pyproject.toml
	$(BIN)/python tools/check_seams.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
