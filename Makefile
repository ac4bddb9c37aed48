# vmlet — run VMs on Kubernetes without libvirt.
# `make help` lists the targets. Everything installs what it needs (apt, Go proxy) and caches it
# outside the repo in $(VMLET_CACHE).

SHELL := /usr/bin/env bash -o pipefail
export PATH := /usr/local/go/bin:$(PATH)
export VMLET_CACHE ?= $(HOME)/.cache/vmlet

# grpcnotrace drops gRPC's golang.org/x/net/trace (and html/template with it): vmlet serves no
# /debug/requests page, and the launcher (one per VM) is 3.2 MiB smaller in memory without it
# (BENCHMARKS.md). Exported so the binaries tests build get it too.
export GOFLAGS := $(strip $(GOFLAGS) -tags=grpcnotrace)

BIN := $(CURDIR)/bin
GO_TEST_FLAGS ?= -count=1 -timeout 40m
# Two test binaries at a time on these 2-core machines keeps TCG boot deadlines comfortable.
GO_TEST_P ?= 2
PKGS ?= ./...

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: deps
deps: ## Install host packages (QEMU, qemu-img, iproute2, ...) with apt when missing.
	@hack/deps.sh

.PHONY: assets
assets: deps ## Build the test guest and the control-plane binaries (cached; first time ≈10 min).
	@echo "assets: test guest..." >&2
	@bash test/assets/guest/build.sh >/dev/null
	@echo "assets: control plane (kube-apiserver, etcd, kubectl; kubelet, kube-scheduler, kube-controller-manager)..." >&2
	@BINARIES="kube-apiserver kubectl etcd kubelet kube-scheduler kube-controller-manager" bash test/assets/controlplane/build.sh >/dev/null

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and the controller's ClusterRole (controller-gen, pinned).
	@bash hack/generate.sh

.PHONY: proto
proto: ## Regenerate the launcher API's Go code from its .proto (protoc from apt, plugins pinned).
	@bash hack/genproto.sh

.PHONY: verify
verify: ## Fail if generated code, CRDs, protobuf, go.mod/go.sum or gofmt are not as committed (names the fix).
	@hack/verify.sh

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned in hack/tools.sh) incl. the import rule for host packages and the launcher.
	@hack/tools.sh golangci-lint
	$(BIN)/golangci-lint run ./...
	@hack/check-imports.sh

##@ Build and run

.PHONY: build
build: ## Build vmlet, vmlet-launcher and vmctl into bin/.
	CGO_ENABLED=0 go build -o $(BIN)/ ./cmd/...

# Where install-plugin puts kubectl-vmctl (a folder on PATH).
PLUGIN_DIR ?= /usr/local/bin

.PHONY: images
images: deps ## Build the OCI images vmlet.dev/{vmlet,vmlet-launcher,pause}:dev without a container engine; prints their folder (hack/images.sh).
	@hack/images.sh

# The real cluster (test/realcluster, cmd/vmlet-cluster): containerd + CNI bridge, etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet on this machine;
# CLUSTER_NODES=2 adds a second kubelet with its own containerd (tainted: migrations go there).
CLUSTER_NODES ?= 1
.PHONY: cluster-up
cluster-up: deps ## Bring up a real Kubernetes here (idempotent; CLUSTER_NODES=2 for two kubelets), then the deploy hook hack/cluster-deploy.sh; prints the kubeconfig (/var/lib/vmlet-cluster/kubeconfig).
	@CGO_ENABLED=0 go build -o $(BIN)/vmlet-cluster ./cmd/vmlet-cluster
	@$(BIN)/vmlet-cluster --nodes $(CLUSTER_NODES) up

.PHONY: cluster-down
cluster-down: ## Tear the real cluster down, leaving nothing (processes, mounts, iptables chains, cgroups, bridge, state); ok when none is up.
	@CGO_ENABLED=0 go build -o $(BIN)/vmlet-cluster ./cmd/vmlet-cluster
	@$(BIN)/vmlet-cluster down

.PHONY: install-plugin
install-plugin: ## Install vmctl as the kubectl plugin kubectl-vmctl in PLUGIN_DIR (kubectl vmctl ...).
	CGO_ENABLED=0 go build -o $(PLUGIN_DIR)/kubectl-vmctl ./cmd/vmctl

LOCAL_STATE ?= /var/lib/vmlet/local
# Extra `vmlet local` flags, e.g. `make run LOCAL_ARGS=--keep-vms` (see `bin/vmlet local --help`).
LOCAL_ARGS ?=

.PHONY: run
run: deps assets build ## Bring up the local single-node stack and boot a demo VM (see README). Ctrl-C stops it.
	@# Images come from OCI layouts of the test guest (hack/local-images.sh): the demo's
	@# vmlet.dev/testguest:latest, a bootable containerDisk, and stand-ins for KubeVirt's examples.
	images="$$(hack/local-images.sh)" && \
	$(BIN)/vmlet local --state-dir $(LOCAL_STATE) \
		--assets "$$(bash test/assets/controlplane/build.sh)" \
		$$images \
		--crds config/crd/bases --demo config/samples/vmi-demo.yaml $(LOCAL_ARGS)

##@ Test

.PHONY: unit
unit: ## Fast tests, no QEMU/API server/root: go test -short; guarded tests skip saying what they need (hack/unit.sh).
	@hack/unit.sh

.PHONY: fuzz
fuzz: ## Run every Go fuzz target for FUZZTIME each (default 30s; FUZZ=regexp picks targets): executions, new corpus entries, crashers; fails on a crasher (hack/fuzz.sh).
	@hack/fuzz.sh

.PHONY: test
test: deps assets images ## Run the whole test suite against real QEMU, kernel, API server and a real kubelet + containerd (root).
	@echo "test: go test $(PKGS) (progress: one line per finished test)" >&2
	go test $(GO_TEST_FLAGS) -p $(GO_TEST_P) -json $(PKGS) | go run ./hack/testreport

# Cycles of make soak's churn (TestNodeChurn; make test runs 200).
SOAK_CYCLES ?= 2000

.PHONY: soak
soak: deps assets ## Churn soak: SOAK_CYCLES (2000) create/delete cycles of VMIs with random volumes and bindings, then a per-kind leak audit (TestNodeChurn; VMLET_CHURN_SEED=S replays a run).
	VMLET_CHURN_CYCLES=$(SOAK_CYCLES) go test -run '^TestNodeChurn$$' -count=1 -v -timeout 60m ./controllers/

.PHONY: bench
bench: deps assets ## Run the Go benchmarks and the side by side with libvirt; regenerate BENCHMARKS.md + bench/results.json (≈30 min).
	@hack/bench-deps.sh
	@hack/bench.sh

.PHONY: bench-hotplug
bench-hotplug: deps assets ## CPU and memory hotplug: spec patch → the guest sees the vCPU / the memory, P50 and P95 (BenchmarkCPUMemoryHotplug; ≈2 min).
	go test -run '^$$' -bench 'BenchmarkCPUMemoryHotplug$$' -benchtime 10x -count=1 -timeout 20m ./controllers/

.PHONY: bench-scrape
bench-scrape: deps assets ## The agent's CPU per /metrics scrape with 20 running VMIs alone (BenchmarkScrape, also part of make bench; ≈3 min).
	go test -run '^$$' -bench 'BenchmarkScrape$$' -benchtime 1x -count=1 -timeout 20m ./controllers/
