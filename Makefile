# dlbench: `make run` (install + a real benchmark on this machine) and `make test`.
# The virtual environment lives outside the clone, keyed on the requirement
# files (requirements.txt includes containers/late/requirements.txt), so CI and
# fresh clones on the same machine reuse it.

PYTHON     ?= python3
CACHE_DIR  ?= $(HOME)/.cache/dlbench
VENV_KEY   := $(shell cat requirements.txt requirements-dev.txt containers/late/requirements.txt | sha256sum | cut -c1-12)
VENV_DIR   := $(CACHE_DIR)/venv-$(VENV_KEY)
VENV       := .venv
FRAMEWORK  ?= torch
RESULTS    ?= results/local.jsonl
# The default job: ResNet-50 at the full 224 px on synthetic data, sized to finish in about a minute on
# 2 CPU cores. Five repeats of 3 timed steps, not two of 8: about as many steps, but a t-interval with 4
# degrees of freedom (t = 2.78, not 12.7), so the first number a newcomer sees has an interval of a few
# percent, not one wider than itself (README, "Two commands"). Override with RUN_ARGS=...
RUN_ARGS   ?= --model resnet50 --batch-size 8 --num-warmup-batches 2 --num-batches 3 --repeats 5
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (tests/infra/parallel.py says what may run side by side); 0 = one process
PYTEST_WORKERS ?= 2
# the linter `make test` runs first (pyproject.toml's [tool.ruff] says which rules), in a cached venv of its own
RUFF_VERSION := 0.17.6
# the documentation site (mkdocs.yml): MkDocs with the Material theme, beside the venv's packages, cached
MKDOCS_MATERIAL_VERSION := 9.8.2

.PHONY: run test lint docs venv clean

venv: $(VENV_DIR)/.complete
	@ln -sfn $(VENV_DIR) $(VENV)
	@$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e . > $(VENV_DIR)/editable.log 2>&1 \
	  || { cat $(VENV_DIR)/editable.log; exit 1; }

# No file prerequisites: the directory name already encodes their content, and a
# fresh clone's newer mtimes must not trigger a rebuild.
$(VENV_DIR)/.complete:
	@echo "creating $(VENV_DIR) (first time only: several minutes)"
	rm -rf $(VENV_DIR)
	$(PYTHON) -m venv $(VENV_DIR)
	$(VENV_DIR)/bin/pip install --quiet --upgrade pip setuptools wheel > $(VENV_DIR)/install.log 2>&1 \
	  || { cat $(VENV_DIR)/install.log; exit 1; }
	$(VENV_DIR)/bin/pip install --quiet -r requirements-dev.txt >> $(VENV_DIR)/install.log 2>&1 \
	  || { tail -50 $(VENV_DIR)/install.log; exit 1; }
	$(VENV_DIR)/bin/python -c "import torch, torchvision, tensorflow, pydantic, rich, pytest, xdist, mlperf_logging.mllog"
	touch $@

run: venv
	$(VENV)/bin/bench --framework $(FRAMEWORK) $(RUN_ARGS) --output $(RESULTS)
	@echo "record appended to $(RESULTS)"

lint:
	@eval "$$(scripts/pip-cached.sh venv ruff==$(RUFF_VERSION) ruff)" && ruff check --quiet . && echo "ruff: no findings"

docs: venv
	@eval "$$(scripts/pip-cached.sh target mkdocs-material==$(MKDOCS_MATERIAL_VERSION) $(VENV)/bin/python)" \
	  && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/python -m mkdocs build --strict --quiet \
	  && echo "docs: build/site/index.html (strict: no broken link or anchor)"

test: lint venv docs
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

-include containers/images.mk
