# kubectl-tao: `make help` lists the targets. The two a newcomer needs: `make demo`, `make test`.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
PKG         := github.com/kubectl-tao/kubectl-tao
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null | sed 's/^\([0-9a-f]\{7,\}\)/v0.0.0-\1/' || echo v0.0.0-dev)
COMMIT      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The commit's date, not the clock's, so that two builds of one commit are identical.
BUILD_DATE  ?= $(shell git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)
LDFLAGS     := -s -w \
  -X $(PKG)/pkg/plugin/version.version=$(VERSION) \
  -X $(PKG)/pkg/plugin/version.commit=$(COMMIT) \
  -X $(PKG)/pkg/plugin/version.buildDate=$(BUILD_DATE)

# The local cluster (see test/localcluster/README.md).
CLUSTER_DIR   ?= $(CURDIR)/.cluster
GPU_NODES     ?= 4
GPUS_PER_NODE ?= 8
LOCALCLUSTER  := bin/localcluster
E2E_FLAGS     ?=

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/kubectl-tao
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kubectl-tao ./cmd/kubectl-tao

.PHONY: test
test: unit e2e ## Run the unit tests, then the end-to-end suite on the local cluster (what CI runs)

.PHONY: unit
unit: ## Run the unit tests
	$(GO) test ./...

.PHONY: e2e
e2e: build $(LOCALCLUSTER) ## Bring the local cluster up, run the e2e suite against it, bring it down
	@rc=0; \
	$(LOCALCLUSTER) up --state-dir '$(CLUSTER_DIR)' --nodes $(GPU_NODES) --gpus-per-node $(GPUS_PER_NODE) || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  KUBECONFIG='$(CLUSTER_DIR)/kubeconfig' KUBECTL_TAO='$(CURDIR)/bin/kubectl-tao' \
	    $(GO) test -tags e2e -count=1 -timeout 20m $(E2E_FLAGS) ./test/... || rc=$$?; \
	fi; \
	$(LOCALCLUSTER) down --state-dir '$(CLUSTER_DIR)' || true; \
	exit $$rc

# The benchmark cluster: 64 one-GPU ranks need 64 GPUs.
BENCH_CLUSTER_DIR ?= $(CURDIR)/.cluster-bench
BENCH_FLAGS       ?=

.PHONY: bench
bench: build $(LOCALCLUSTER) ## Run the Go benchmarks, then kubectl vs kubectl-tao on the local cluster (docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./...
	@rc=0; \
	$(LOCALCLUSTER) up --state-dir '$(BENCH_CLUSTER_DIR)' --nodes 8 --gpus-per-node 8 || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  KUBECONFIG='$(BENCH_CLUSTER_DIR)/kubeconfig' $(GO) run ./test/bench/logsbench -tao '$(CURDIR)/bin/kubectl-tao' $(BENCH_FLAGS) || rc=$$?; \
	fi; \
	$(LOCALCLUSTER) down --state-dir '$(BENCH_CLUSTER_DIR)' || true; \
	exit $$rc

.PHONY: lint
lint: ## Check formatting and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/...

.PHONY: fmt
fmt: ## Format the Go sources
	gofmt -w $$(git ls-files '*.go')

$(LOCALCLUSTER): FORCE
	@$(GO) build -o $@ ./test/localcluster/cmd/localcluster

.PHONY: cluster-build
cluster-build: $(LOCALCLUSTER) ## Build (once per machine) the local cluster's binaries into the user cache
	$(LOCALCLUSTER) build

.PHONY: cluster-up
cluster-up: $(LOCALCLUSTER) ## Start (or reuse) the local GPU cluster; kubeconfig in .cluster/kubeconfig
	$(LOCALCLUSTER) up --state-dir '$(CLUSTER_DIR)' --nodes $(GPU_NODES) --gpus-per-node $(GPUS_PER_NODE)

.PHONY: cluster-down
cluster-down: $(LOCALCLUSTER) ## Stop the local cluster and remove its state
	$(LOCALCLUSTER) down --state-dir '$(CLUSTER_DIR)'

.PHONY: demo
demo: build cluster-up ## Bring the local cluster up and run a multi-node GPU job through the plugin
	@PATH='$(CURDIR)/bin':"$$PATH" KUBECONFIG='$(CLUSTER_DIR)/kubeconfig' test/demo/demo.sh

.PHONY: clean
clean: ## Remove build output (not the cluster binary cache)
	rm -rf bin dist

.PHONY: FORCE
FORCE:
