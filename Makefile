# The project's checks, one step a target (README.md's test command is `make install check`). make names the step that
# failed ("make: *** [Makefile:NN: types] Error 1"); each step runs alone too (`make types`).

VENV := .venv
BIN := $(VENV)/bin

.PHONY: install check lint format imports types test

# .venv with the project and every extra, through the lock (constraints.txt), installed by uv (in seconds where pip
# takes minutes); uv reads no pip configuration, so pip's find-links are handed on. PySpark's wheel is built with its
# jars stored, not deflated again (pipelines/app/pack.py, UV_PYSPARK_BUILD).
install:
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt uv
	UV_FIND_LINKS="$${PIP_FIND_LINKS:-}" $(BIN)/uv pip install -p $(BIN)/python --compile-bytecode \
	  --config-settings-package "pyspark:--build-option=--compression=stored" \
	  -c constraints.txt -e ".[test,airflow,deploy,docs]"
	@touch $(VENV)/.installed  # the install's end, which .ci/run's other Pythons wait for before theirs

check: lint format imports types test

lint:  # ruff.toml
	$(BIN)/ruff check .

format:  # `$(BIN)/ruff format .` fixes it
	$(BIN)/ruff format --check .

imports:  # the import contracts, .importlinter
	$(BIN)/lint-imports

types:  # mypy.ini
	$(BIN)/mypy

test:  # pytest.ini: how the suite runs (docs/contributing.md, "How the suite runs")
	$(BIN)/python -m pytest
