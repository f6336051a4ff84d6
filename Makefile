# Every target installs what it needs into .venv first; nothing relies on a shell's history.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Many small matrices: one BLAS thread is far faster than a pool (see agent/cli.py).
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --config-settings editable_mode=compat -e '.[test,lint]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/robotctl optimise config/paper-example.yaml --all-subsets

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check model fitting policies agent crawler bench tests
	$(BIN)/mypy model fitting policies agent crawler

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
