# The two commands of the README, each doing its own set-up in .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/00_demo.py $(ARGS)

test: $(STAMP)
	$(PY) -m mypy
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/run_all.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache bench/results
