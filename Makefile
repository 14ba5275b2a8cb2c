# gpu-auditor developer commands. Everything installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit lint real-torch mutation control-plane tools manifest-checkers manifests bench clean image node e2e

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

## demo: a local control plane with kwok GPU nodes, the agent on the fake node, the operator,
## and three failing pods; prints each pod's diagnosis, then cleans up.
demo: $(STAMP) control-plane
	$(PY) -m devtools.demo

## test: lint, type checks, import contracts, then unit + integration + e2e tests (gpu tests skip
## without a GPU, with the reason shown).
test: $(STAMP) control-plane node tools image lint
	GPU_AUDITOR_REQUIRE_CLUSTER=1 GPU_AUDITOR_REQUIRE_E2E=1 $(PY) -m pytest
	$(MAKE) real-torch
	$(PY) scripts/mutation.py --changed-vs HEAD~1 --max-seconds 600 --fail-under 85 --out .mutation/ci

## e2e: only the tests that run our image (tests/e2e, docs/real-node.md).
e2e: $(STAMP) control-plane node image
	GPU_AUDITOR_REQUIRE_E2E=1 $(PY) -m pytest -m e2e

## real-torch: every allocator setting we recommend or reject, checked by a real torch's own
## parser (CPU is enough). torch is too big for .venv: its own venv, cached beside the binaries
## (about 2 minutes to install once, 4 s to run).
TORCH_VENV := $(HOME)/.cache/gpu-auditor/torch-2.13.0-venv
real-torch:
	test -x $(TORCH_VENV)/bin/pytest || ($(PYTHON) -m venv $(TORCH_VENV) && \
	  $(TORCH_VENV)/bin/pip install -q torch==2.13.0 pytest PyYAML)
	GPU_AUDITOR_REQUIRE_TORCH=1 PYTHONPATH=.:operator $(TORCH_VENV)/bin/python -m pytest -q \
	  -p no:cacheprovider tests/unit/diagnosis/test_allocconf_real_torch.py

unit: $(STAMP)
	$(PY) -m pytest -m unit

## mutation: mutation testing of the diagnosis core with mutmut 3 (scripts/mutation.py): the
## score per module and every survivor in bench/results/mutation.md (+ .json). `make test` runs
## the modules the last commit changed, time-boxed; this runs them all.
mutation: $(STAMP)
	$(PY) scripts/mutation.py --fail-under 85

lint: $(STAMP)
	$(VENV)/bin/ruff check operator node_agent devtools tests bench evaluation
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## control-plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, helm
## built from Go modules into ~/.cache/gpu-auditor/bin (reused when present).
control-plane:
	scripts/build-control-plane.sh

## node: kubelet, kube-proxy (same Kubernetes module), containerd, CoreDNS and pause for the e2e
## group's real node, cached like control-plane; installs runc and CNI plugins from Debian.
node:
	scripts/build-node.sh

## tools: promtool and prometheus (Debian's package) for the alert-rule and scrape tests, kube-score
## (from its Go module). The dashboard's lint rules need no tool: devtools/dashboard_lint, in .venv.
tools: manifest-checkers
	scripts/install-tools.sh

## manifest-checkers: kube-score built from its Go module into ~/.cache/gpu-auditor/bin.
manifest-checkers:
	scripts/build-manifest-checkers.sh

## image: the image from the Dockerfile, built by buildah on a local Debian base (no registry
## needed); tagged localhost/gpu-auditor:dev (docs/real-node.md).
image:
	scripts/build-image.sh

manifests:
	scripts/render-manifests.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
