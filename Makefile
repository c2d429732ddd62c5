# metalclaim: everything runs from a project-local virtualenv and collections path.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
COLLECTIONS := $(CURDIR)/.collections
DEVENV_DIR ?= .devenv
HOSTS ?= 4
# The other ansible-core releases of the supported range (meta/runtime.yml), exact, the newest patch of each: the
# .venv has 2.19; hack/ansible-matrix.sh picks each one's Python (2.20 and 2.21 need 3.12 or later).
ANSIBLE_MATRIX ?= 2.17.14 2.18.19 2.20.10 2.21.5
# pytest-xdist workers: each runs whole files (--dist loadfile) against a devenv of its own. Most tests wait on
# processes and the API server, so two workers keep two cores busy where one left them half idle. Files marked
# minutes(N) go first, longest first (tests/conftest.py), so that both workers end together.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
BENCH_DIR ?= .bench-devenv
BENCH_OUT ?= bench/out
BENCH_ARGS ?=

export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH := false
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help setup system-packages test-packages vm-setup demo demo-vm test static-checks role-checks e2e unit integration lint build galaxy-check sanity matrix changelog molecule devenv-up devenv-down controlplane clean lock bench

help:
	@echo "make demo   - bring up the local environment, start the controller, play the user guide with kubectl"
	@echo "make demo-vm - the same on real VMs (root): a disk image deployed, the VM's serial console shown"
	@echo "make test   - lint, sanity (and the ansible-core matrix), molecule, unit and integration tests"
	@echo "make e2e    - the end-to-end tests on real VMs (root, libvirtd, QEMU): tests/e2e, phase timings printed"
	@echo "make vm-setup - what make e2e and make demo-vm install first (system packages, libvirt-python)"
	@echo "make system-packages PROFILES='test vm' - install (as root) or print the system packages of bindep.txt"
	@echo "make devenv-up / devenv-down - start/stop the environment in $(DEVENV_DIR)"
	@echo "make image  - the controller image (podman; its base debootstrapped from Debian packages, no registry)"
	@echo "make node-test - the image run as the Deployments run it, on the devenv's node (root; containerd, kubelet)"
	@echo "make bench  - the benchmark beside the one-run-per-event baseline (figures, a JSON file and a PNG in $(BENCH_OUT))"
	@echo "make changelog - fold changelogs/fragments/ into galaxy.yml's release (changelog.yaml, CHANGELOG.rst)"

# The controller (the wheel's package) and the development package (devtools/: the devenv, the test and bench
# helpers; never in the wheel or the tarball), both editable.
$(VENV)/.installed: requirements/runtime.txt requirements/dev.txt requirements/constraints.txt pyproject.toml \
		devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/dev.txt -c requirements/constraints.txt
	$(PY) -m pip install --quiet --no-deps -e . -e devtools
	touch $@

$(COLLECTIONS)/ansible_collections/kubernetes/core/MANIFEST.json: $(VENV)/.installed hack/install-kubernetes-core.py
	$(PY) hack/install-kubernetes-core.py --dest $(COLLECTIONS)
	touch $@

# Our own collection is used in place, through a symlink in the collections path.
$(COLLECTIONS)/ansible_collections/metalclaim/hostclaim:
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

setup: $(VENV)/.installed $(COLLECTIONS)/ansible_collections/kubernetes/core/MANIFEST.json $(COLLECTIONS)/ansible_collections/metalclaim/hostclaim

# The system packages of bindep.txt's PROFILES (demo, test, deploy, vm): installed with apt-get when make runs as
# root, else the one `apt-get install` line to run is printed and make stops. Each target below asks for its own.
PROFILES ?= demo
system-packages: $(VENV)/.installed
	bash hack/system-packages.sh $(PROFILES)

# First, so that a machine that lacks them stops in seconds, not after the linters.
test-packages: $(VENV)/.installed
	bash hack/system-packages.sh test

# What the VM targets need beyond setup: the `vm` system packages, then libvirt-python built against them.
vm-setup: setup
	bash hack/system-packages.sh vm
	$(PY) -m pip install --quiet -r requirements/vm.txt -c requirements/constraints.txt

controlplane: setup
	bash devtools/metalclaim_dev/devenv/build-controlplane.sh

devenv-up: setup
	$(PY) -m metalclaim_dev.devenv up --dir $(DEVENV_DIR) --hosts $(HOSTS)

devenv-down: setup
	$(PY) -m metalclaim_dev.devenv down --dir $(DEVENV_DIR)

demo: setup
	bash hack/system-packages.sh demo
	$(PY) -m metalclaim_dev.devenv.demo --dir $(DEVENV_DIR) --hosts $(HOSTS)

# The same guide on real VMs (root; libvirtd, QEMU, OVMF): a disk image deployed, the VM's serial console shown.
VMS ?= 1
demo-vm: vm-setup
	$(PY) -m metalclaim_dev.devenv.demo --dir $(DEVENV_DIR) --vms $(VMS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/yamllint --strict .
	# A project-local ANSIBLE_HOME: ansible-lint installs this collection there, never a stale shared copy.
	ANSIBLE_HOME=$(CURDIR)/.ansible $(VENV)/bin/ansible-lint --profile production

unit: setup
	$(PY) -m pytest tests/unit -q

integration: test-packages setup controlplane
	$(PY) -m pytest $(PYTEST_PARALLEL) tests/integration -q

build: setup
	rm -rf build && mkdir -p build
	$(VENV)/bin/ansible-galaxy collection build --output-path build .
	# The controller wheel beside the tarball (the Containerfile installs both); setuptools builds in build/.
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir build .
	rm -rf build/lib build/bdist.*
	$(VENV)/bin/ansible-galaxy collection install --force -p build/install build/metalclaim-hostclaim-*.tar.gz
	ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/build/install:$(COLLECTIONS) $(VENV)/bin/ansible-doc -l metalclaim.hostclaim

# galaxy-importer on the built tarball, as Galaxy imports it (offline: hack/galaxy-importer.cfg). It exits 1 only
# when it rejects the tarball and logs other failures (a module whose docs ansible-doc cannot read) as ERROR lines
# while still "completing successfully": either fails. The whole log: build/galaxy-importer.log.
galaxy-check: build
	set -o pipefail; cd build && GALAXY_IMPORTER_CONFIG=$(CURDIR)/hack/galaxy-importer.cfg \
		$(CURDIR)/$(PY) -m galaxy_importer.main metalclaim-hostclaim-*.tar.gz 2>&1 | tee galaxy-importer.log | grep -v '^Loading '
	! grep -E '^(ERROR|CRITICAL)' build/galaxy-importer.log

# ansible-test sanity on the built tarball (see hack/sanity.sh for why it is wrapped).
sanity: build
	bash hack/sanity.sh

# The collection's unit tests and its ansible-core-dependent sanity tests on each release of ANSIBLE_MATRIX,
# each in a small virtualenv of its own (.venv-ansible-X, made once): hack/ansible-matrix.sh.
matrix: build
	bash hack/ansible-matrix.sh $(ANSIBLE_MATRIX)

# The fragments of changelogs/fragments/ folded into the release galaxy.yml names (changelogs/changelog.yaml and
# CHANGELOG.rst), then removed (changelogs/config.yaml: keep_fragments false), so the tarball ships no stale one:
# after adding a fragment, and after bumping the version (a new release). tests/unit/test_changelog.py fails while
# a fragment waits. --reload-plugins: a module added since the last fold is listed under New Modules. A later fold
# warns "Found no release_summary section": of the fragments it adds; the release keeps its summary.
changelog: setup
	$(VENV)/bin/antsibull-changelog lint
	$(VENV)/bin/antsibull-changelog release --version $(shell sed -n 's/^version: *//p' galaxy.yml) --update-existing \
		--reload-plugins

molecule: setup controlplane
	$(VENV)/bin/molecule test --all  # molecule/*: default (the install role), hosts, policy, claims, claimsets

# The checks before the tests, on two lanes at once: the static ones (lint, the tarball, sanity, the ansible-core
# matrix: CPU-bound, one after the other, as ansible-test's virtualenvs are shared) beside the control plane's
# build and molecule (mostly waiting on its control planes). Each lane's output comes in one piece when it ends.
test: test-packages setup
	@echo "test: lint, galaxy-check, sanity, matrix beside controlplane, molecule (each lane printed when it ends)"
	$(MAKE) -j2 --output-sync=recurse static-checks role-checks
	$(PY) -m pytest $(PYTEST_PARALLEL) --durations=25 tests/unit tests/integration

static-checks:
	$(MAKE) -j1 lint galaxy-check sanity matrix

role-checks:
	$(MAKE) -j1 controlplane molecule

# Real VMs under TCG (root; libvirtd, QEMU, OVMF, libvirt-python: see README), not part of `make test`: the controller
# end to end, the deploy ISO and disk images, faults. Each file brings up a devenv and VMs of its own; two files at
# once keep both cores busy (a VM mostly waits on its firmware and the controller's requeues). METALCLAIM_E2E_VMS=4
# runs the controller flow on 4 VMs at once.
e2e: vm-setup controlplane
	$(PY) -m pytest $(PYTEST_PARALLEL) --durations=25 tests/e2e

# The controller image, built here with podman and no registry: its base is debootstrapped from Debian packages
# (hack/build-base-image.sh, cached in ~/.cache/metalclaim), or BASE_IMAGE=docker.io/library/python:3.11-slim.
IMAGE ?= localhost/metalclaim-controller:$(shell sed -n 's/^version: *//p' galaxy.yml)
image: build
	bash hack/system-packages.sh node
	bash hack/build-image.sh $(IMAGE)

# kubelet and kube-scheduler for the devenv's node, built from Go modules as the control plane is (same cache).
node-binaries: controlplane
	bash devtools/metalclaim_dev/devenv/build-controlplane.sh --node >/dev/null

# The image as config/manager runs it (read-only root, user 65532), then config/default on the devenv's node
# (kubelet, kube-scheduler, containerd: metalclaim_dev.devenv.node; root): tests/node. `make -j2 node-test` builds the
# image (mostly downloads) while Go builds kubelet.
node-test: image node-binaries
	METALCLAIM_IMAGE=$(IMAGE) $(PY) -m pytest -p no:xdist --durations=10 tests/node -q

# Figures, never pass/fail, and not part of `make test`: its own devenv, sizes in BENCH_ARGS (see bench/run.py --help).
bench: setup controlplane
	$(PY) -m pip install --quiet -r requirements/bench.txt -c requirements/constraints.txt
	$(PY) bench/run.py --dir $(BENCH_DIR) --out $(BENCH_OUT) $(BENCH_ARGS)

lock: vm-setup  # every pinned package installed, libvirt-python included
	$(PY) -m pip freeze --exclude-editable | sed '1i # Exact versions of the whole dependency tree (pip install -c). Regenerate with `make lock`.' > requirements/constraints.txt

clean:
	-$(PY) -m metalclaim_dev.devenv down --dir $(DEVENV_DIR)
	rm -rf $(VENV) .venv-ansible-* .collections .ansible build .pytest_cache .ruff_cache
