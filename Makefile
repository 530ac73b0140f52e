# crashlab: `make run` sets up the host, builds the guest image and runs the default scenario;
# `make test` runs the tests (the unit tests and the ones that boot real guests).
VENV     ?= .venv
PY       := $(VENV)/bin/python
SCENARIO := $(VENV)/bin/scenario
DEFAULT_SCENARIO ?= ext4-ordered-fsync

.PHONY: run setup image test lint doctor vagrant-validate

run: image
	$(SCENARIO) run $(DEFAULT_SCENARIO)

# Host packages (needs root: enables Debian contrib and bookworm-backports) and a venv.
setup: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml scripts/install-host-deps
	scripts/install-host-deps
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Cached under ~/.cache/crashlab by recipe hash: a no-op unless images/ changed.
image: setup
	$(SCENARIO) image build

doctor: setup
	$(SCENARIO) doctor

# Two workers, each test taken by whichever is free (worksteal): a test with a guest under
# TCG keeps about one core busy, so two at once nearly halve the time on a 2-core host.
# The tests marked exclusive (they look at every libvirt domain or orphaned QEMU of the
# host) run alone after them: run beside the others they met load-sensitive timing too.
TEST_WORKERS ?= 2
test: image
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not exclusive"
	$(PY) -m pytest -m exclusive

lint: setup vagrant-validate
	$(VENV)/bin/ruff check harness faults tests bench
	$(VENV)/bin/mypy

# The Vagrantfile's syntax and its libvirt provider settings (vagrant-libvirt); `vagrant up`
# itself needs a box download, which a CI host without the internet cannot do.
vagrant-validate: setup
	VAGRANT_DEFAULT_PROVIDER=libvirt vagrant validate
