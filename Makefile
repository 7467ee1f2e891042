# soperator.slurm developer entry points. `make test` is what CI runs (after `make deps`).
SHELL := /bin/bash
PYTHON ?= python3
SANITY_ROOT := build/sanity/ansible_collections/soperator/slurm
APT_PACKAGES := slurm-wlm slurmctld slurmd slurmdbd slurm-client slurmrestd slurm-wlm-jwt-plugin munge libslurm-dev \
	mariadb-server \
	openssh-server rsync git make gcc umoci runc prometheus skopeo docker-registry zstd \
	slapd ldap-utils sssd-ldap sssd-tools libnss-sss libpam-sss

.PHONY: deps up down test unit lint sanity molecule ci render bench crds spank k8s-build k8s-up k8s-down k8s-demo \
	k8s-demo-down

# Debian packages (real Slurm, munge, MariaDB, sshd; slapd and SSSD for spec.identity's tests) and Python packages.
# Safe to re-run. slapd is preseeded to make no database of its own (the tests start theirs). libnss-sss's postinst
# appends `sss` to passwd, group, shadow, services and netgroup of the host's /etc/nsswitch.conf (and libpam-sss adds
# pam_sss to /etc/pam.d/common-*): harmless without a host sssd (nss_sss answers "unavailable", pam_localuser passes
# local users first); the tests never use the host's files but their own (local/identity.py).
deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	echo "slapd slapd/no_configuration boolean true" | $$SUDO debconf-set-selections; \
	missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	$(PYTHON) -m pip install -q -r requirements.txt -r requirements-dev.txt

SPEC ?= examples/small-cpu.yml

# The embedded default: the spec as a real Slurm cluster of local processes (README quick start).
up: deps
	ansible-playbook playbooks/site.yml -e slurm_target=local -e spec_file=$(SPEC)

down:
	ansible-playbook playbooks/teardown.yml -e slurm_target=local -e spec_file=$(SPEC)

# Every test, the fast suite first: tests/unit (no daemons, CPU-bound: one worker per core; fails in minutes), then
# the suites that mostly wait on daemons, pods and timeouts, side by side in TEST_WORKERS pytest-xdist workers
# (tests/xdist_groups.py: what shares a cluster stays in one worker; the real node is one group). CI runs the same parts, each as soon as what it needs is
# built (.ci/run): test-unit and test-local (tests/slurm, tests/ansible) need `make deps` only, test-kube
# (tests/integration) `make k8s-build`, test-images (tests/images: podman only) `make images images-trixie runner-local`,
# test-node (tests/realnode) both `make k8s-build` and `make images images-trixie
# runner-local`; without them those tests skip, environmentally.
PYTEST = $(PYTHON) -m pytest -q $(PYTEST_ARGS)
TEST_WORKERS ?= 4
UNIT_WORKERS ?= 2
XDIST = --dist loadgroup --no-loadscope-reorder
# CI runs the parts at once: fewer workers each (every test-kube worker runs an API server of its own).
PART_WORKERS ?= 3
LOCAL_SUITES := tests/slurm tests/ansible
KUBE_SUITES := tests/integration
NODE_SUITES := tests/realnode
IMAGE_SUITES := tests/images
.PHONY: test-unit test-local test-kube test-node test-images k8s-control-plane node-binaries
test: deps
	$(PYTEST) -n $(UNIT_WORKERS) tests/unit
	$(PYTEST) -n $(TEST_WORKERS) $(XDIST) $(NODE_SUITES) $(IMAGE_SUITES) $(KUBE_SUITES) $(LOCAL_SUITES)

test-unit unit:
	$(PYTEST) -n $(UNIT_WORKERS) tests/unit

test-local:
	$(PYTEST) -n $(PART_WORKERS) $(XDIST) $(LOCAL_SUITES)

test-kube:
	$(PYTEST) -n $(PART_WORKERS) $(XDIST) $(KUBE_SUITES)

# The real node is one per machine: its files run in two lanes that share it (tests/xdist_groups.py).
test-node:
	$(PYTEST) -n 2 $(XDIST) $(NODE_SUITES)

test-images:
	$(PYTEST) -n $(PART_WORKERS) $(XDIST) $(IMAGE_SUITES)

# ansible-lint over the playbooks and roles; mypy over the typed public API (mypy.ini says which modules).
lint:
	ansible-lint --profile production --offline
	$(PYTHON) -m mypy

# ansible-test needs the collection under an ansible_collections/<namespace>/<name> path, with the collections it
# depends on beside it. Its per-test virtualenvs bootstrap pip from a host we cannot reach: tools/offline_get_pip.py
# stands in for that script (see its docstring).
sanity:
	rm -rf build/sanity && mkdir -p $(SANITY_ROOT) build/sanity/ansible_collections/kubernetes
	ln -s "$$($(PYTHON) -c 'import ansible_collections.kubernetes.core as k; print(list(k.__path__)[0])')" \
		build/sanity/ansible_collections/kubernetes/core
	pip_version=$$($(PYTHON) -c 'import ansible_test, os, re; \
		print(re.search(r"pip=.([0-9.]+)", open(os.path.join(os.path.dirname(ansible_test.__file__), \
		"_internal", "python_requirements.py")).read()).group(1))'); \
	mkdir -p ~/.ansible/test/cache && cp tools/offline_get_pip.py ~/.ansible/test/cache/get_pip_$${pip_version//./_}.py
	rsync -a --exclude /build --exclude /collections --exclude /.git --exclude '__pycache__' \
		--exclude .pytest_cache --exclude .hypothesis ./ $(SANITY_ROOT)/
	cd $(SANITY_ROOT) && git init -q && git add -A && \
		ansible-test sanity --python $$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
			--color no

# converge (site.yml, local target) -> idempotence -> verify (a real srun job) -> destroy.
molecule:
	molecule test

ci: test lint sanity molecule

render:
	ansible-playbook playbooks/render.yml -e spec_file=examples/gpu-accounting.yml -e render_dest=build/rendered

bench:
	$(PYTHON) bench/bench_render.py
	$(PYTHON) bench/bench_drain.py
	$(PYTHON) bench/bench_kube_real.py
	$(PYTHON) bench/bench_health_drain.py
	$(PYTHON) bench/bench_exporter.py
	$(PYTHON) bench/bench_registration.py --nodes 256
	$(PYTHON) bench/bench_ephemeral.py --samples 3

crds:
	$(PYTHON) tools/generate_crds.py

# The chroot SPANK plugin (images/spank_chroot: jobs run in the jail) -> build/spank/spank_chroot.so.
# Needs gcc and <slurm/spank.h> (libslurm-dev). `make -C images/spank_chroot install` puts it in /usr/lib/slurm.
spank:
	$(MAKE) -C images/spank_chroot BUILD_DIR=$(CURDIR)/build/spank

# A real Kubernetes control plane (tools/k8s): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
# with fake Nodes on loopback, built from the Go module proxy into ~/.cache/soperator/k8s (a second build is a no-op).
# k8s-up writes $(K8S_STATE)/kubeconfig and $(K8S_STATE)/audit.log; k8s-down stops only what k8s-up started.
# NODE=real: one real node instead (tools/k8s/node.py: kubelet, kube-proxy, containerd, CoreDNS, the bridge CNI, a
# hostPath provisioner), with the images of `make images` imported; needs root, runc and containernetworking-plugins.
K8S_STATE ?= build/k8s
NODE ?= kwok
k8s-build: k8s-control-plane node-binaries

# The control plane (kube-*, kubectl, etcd, kwok): all tests/integration needs; the real node's containerd and CoreDNS
# (node-binaries) only tests/realnode.
k8s-control-plane:
	tools/k8s/build.sh

node-binaries:
	tools/node/build.sh

k8s-up: k8s-build
	$(PYTHON) tools/k8s/cluster.py up --state $(K8S_STATE) --node $(NODE)

k8s-down:
	$(PYTHON) tools/k8s/cluster.py down --state $(K8S_STATE)

# The product on Kubernetes in one command (root): builds what is missing, starts the control plane with the real
# node, deploys examples/small-cpu.yml sized to it, checks srun -N2 and prints how to reach the login node.
K8S_DEMO_STATE ?= build/k8s-demo
k8s-demo: deps images-deps
	$(PYTHON) tools/k8s/demo.py up --state $(K8S_DEMO_STATE)

k8s-demo-down:
	$(PYTHON) tools/k8s/demo.py down --state $(K8S_DEMO_STATE)

# --- Container images (images/): built here with buildah from Debian root filesystems that mmdebstrap makes from
# Debian's packages (no registry pull, no Docker engine). SUITE=forky (Slurm 26.05, the default) or trixie (24.11);
# the tag defaults to <Slurm version>-<collection version>; REGISTRY=... and TAG=... override, ONLY=controller,worker
# builds only those, PUSH=1 pushes; IMAGE_JOBS root filesystems are made at once (default 3).
# Root filesystems and .deb files are cached in $${SOPERATOR_CACHE:-~/.cache/soperator}/images and every image is
# keyed by its inputs: a second `make images` rebuilds nothing. images-smoke runs them as a Slurm cluster with
# podman from the rendered manifests of $(IMAGES_SPEC) with accounting (images/smoke.py). images-save writes OCI
# archives.
IMAGES_APT_PACKAGES := podman buildah runc mmdebstrap uidmap netavark aardvark-dns openssh-client containernetworking-plugins
IMAGES_SPEC ?= examples/small-cpu.yml
IMAGES_ENV = SUITE=$(SUITE) REGISTRY=$(REGISTRY) TAG=$(TAG)
.PHONY: images-deps images images-trixie images-save images-smoke images-check-configs jail runner-local

images-deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	missing=$$(for p in $(IMAGES_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

images: images-deps
	$(IMAGES_ENV) $(PYTHON) images/build.py $(if $(ONLY),--only $(ONLY)) $(if $(PUSH),--push)

# The previous Slurm (24.11, trixie), only the images tests/realnode/test_upgrade_realnode.py starts its old cluster
# from (its COMPONENTS): no runner image (its pip install is the slowest root filesystem), no login image (that
# cluster has no login pod).
images-trixie: images-deps
	$(MAKE) images SUITE=trixie ONLY=controller,worker,accounting,jail,mariadb

images-save: images-deps
	$(IMAGES_ENV) $(PYTHON) images/build.py --save build/images/oci

images-smoke: images
	$(IMAGES_ENV) $(PYTHON) images/smoke.py --accounting --spec $(IMAGES_SPEC)

# The jail root filesystem for the local target: the jail image's recipe (Slurm clients, munge, python3, the SPANK
# plugin at /usr/lib/slurm/spank_chroot.so, /etc/hosts) from this machine's Debian suite, so its Slurm is the host's.
JAIL_SUITE ?= $(shell . /etc/os-release 2>/dev/null && echo $$VERSION_CODENAME)
jail: images-deps
	$(PYTHON) images/build.py --suite $(JAIL_SUITE) --jail-tarball build/jail/jail-rootfs.tar
	@# The host's slurmstepd loads the plugin from the path plugstack.conf names, and srun in the jail from the same
	@# path inside it: /usr/lib/slurm/spank_chroot.so in both (built against the host's spank.h, as in the tarball).
	$(MAKE) -C images/spank_chroot install BUILD_DIR=$(CURDIR)/build/spank

# The ansible-runner image for the local target: the runner's recipe from this machine's Debian suite, so its Slurm
# client speaks the local cluster's (a client talks to a slurmctld at most two releases apart: forky's 26.05 cannot
# reach this host's 22.05). Always tagged <host Slurm version>-<collection version> (a TAG given for `make images`
# would name the forky runner's tag), e.g. ansible-runner:22.05.8-0.1.0; REGISTRY applies.
runner-local: images-deps
	TAG= $(PYTHON) images/build.py --suite $(JAIL_SUITE) --only ansible-runner

# Each example's rendered slurm.conf, started by the controller image's slurmctld (with slurmdbd where it has one).
# Then the topology.yaml of spec.topology.nodeLabels (tree and block), read by that slurmctld (images/check_topology.py).
images-check-configs: images
	$(IMAGES_ENV) $(PYTHON) images/check_configs.py
	$(IMAGES_ENV) $(PYTHON) images/check_topology.py
