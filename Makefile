# The two commands of the README, each doing its own set-up in .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test docs wheel bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/00_demo.py $(ARGS)

test: $(STAMP)
	$(PY) -m mypy
	$(MAKE) --no-print-directory docs
	$(PY) -m pytest $(PYTEST_ARGS)

# The documentation site (mkdocs.yml), strict: a broken link or a page left out of the nav fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir $(VENV)/site

# The wheel a user installs (pip install dist/greenroom-*.whl); CI builds it too.
wheel: $(STAMP)
	rm -rf dist
	$(PY) -m pip wheel -q --no-deps --wheel-dir dist .

bench: $(STAMP)
	$(PY) bench/run_all.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache bench/results dist site
