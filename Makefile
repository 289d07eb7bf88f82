# kubectl-tao: `make help` lists the targets. The two a newcomer needs: `make demo`, `make test`.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
# The Go release every target builds and tests with, whatever Go the machine has: go1.26.8 has
# standard-library vulnerabilities on paths every TLS client takes (crypto/x509, net/http; see
# `make vulncheck`), fixed in later releases. The go command fetches this one once from the Go
# module proxy (~76 MB, ~10 s) and caches it. `go` run by hand uses the machine's own Go.
GO_TOOLCHAIN := go1.27.3
export GOTOOLCHAIN := $(GO_TOOLCHAIN)
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
# The real kubelet node next to the simulated ones (test/localcluster/README.md): 1 requires it,
# 0 leaves it out, auto starts it where the host allows it (root on Linux). `make e2e` defaults
# to auto, `make cluster-up` to 0. With it on, `make e2e` also builds the stager image for it.
REAL_NODE     ?=
REAL_NODE_E2E := $(or $(REAL_NODE),auto)
# With the node on, the launcher's own real-node test (up, pods, a second cluster beside, down
# leaves the host clean) runs first, since the suite's cluster then holds the machine's node.
REAL_NODE_PRE  = $(if $(E2E_FLAGS),,$(REAL_NODE_ON))
REAL_NODE_ON  := $(if $(filter 1 true on,$(REAL_NODE_E2E)),1,$(if $(filter auto,$(REAL_NODE_E2E)),$(if $(filter 0,$(shell id -u 2>/dev/null)),$(filter Linux,$(shell uname -s)))))
# versitygw, a real S3 server (Apache-2.0) that the staging tests run on loopback. Set before the
# e2e rule, whose prerequisites make expands as it reads them.
VERSITYGW_VERSION := v1.8.0
VERSITYGW         := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kubectl-tao/tools/versitygw-$(VERSITYGW_VERSION)/versitygw

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: toolchain
toolchain: ## Fetch (once) and show the Go toolchain the targets use
	$(GO) version

.PHONY: build
build: ## Build bin/kubectl-tao
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kubectl-tao ./cmd/kubectl-tao

.PHONY: test
test: unit e2e ## Run the unit tests, then the end-to-end suite on the local cluster (what CI runs)

.PHONY: unit
unit: ## Run the unit tests
	$(GO) test ./...

.PHONY: e2e
e2e: STAGER_PLATFORMS = linux/$(shell $(GO) env GOARCH)
e2e: build $(LOCALCLUSTER) $(VERSITYGW) $(if $(REAL_NODE_ON),stager-image) ## Bring the local cluster up, run the e2e suite against it, bring it down
	@rc=0; \
	$(if $(REAL_NODE_PRE),$(GO) test -tags e2e -count=1 -timeout 30m -run '^TestRealNode$$' ./test/localcluster/ || rc=$$?;) \
	[ $$rc -ne 0 ] || $(LOCALCLUSTER) up --state-dir '$(CLUSTER_DIR)' --nodes $(GPU_NODES) --gpus-per-node $(GPUS_PER_NODE) --real-node=$(REAL_NODE_E2E) || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  KUBECONFIG='$(CLUSTER_DIR)/kubeconfig' KUBECTL_TAO='$(CURDIR)/bin/kubectl-tao' VERSITYGW='$(VERSITYGW)' \
	    $(LOCALCLUSTER) exec --state-dir '$(CLUSTER_DIR)' -- $(GO) test -tags e2e -count=1 -timeout 45m $(E2E_FLAGS) ./test/... || rc=$$?; \
	fi; \
	$(LOCALCLUSTER) down --state-dir '$(CLUSTER_DIR)' || true; \
	exit $$rc

# versitygw is built once per machine into the tools cache (about 4.5 minutes cold on 2 cores).
$(VERSITYGW):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Install versitygw (the S3 server of the staging tests) into the tools cache

# The benchmark cluster: 64 one-GPU ranks need 64 GPUs.
BENCH_CLUSTER_DIR ?= $(CURDIR)/.cluster-bench
BENCH_FLAGS       ?=

.PHONY: bench
bench: build $(LOCALCLUSTER) ## Go benchmarks, kubectl vs kubectl-tao (logs, status) on the local cluster, then bench-capacity (docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./...
	@rc=0; \
	$(LOCALCLUSTER) up --state-dir '$(BENCH_CLUSTER_DIR)' --nodes 8 --gpus-per-node 8 || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  KUBECONFIG='$(BENCH_CLUSTER_DIR)/kubeconfig' $(GO) run ./test/bench/logsbench -tao '$(CURDIR)/bin/kubectl-tao' $(BENCH_FLAGS) || rc=$$?; \
	fi; \
	$(LOCALCLUSTER) down --state-dir '$(BENCH_CLUSTER_DIR)' || true; \
	exit $$rc
	$(MAKE) --no-print-directory bench-capacity

# The capacity benchmark's cluster: 5,000 nodes take about a minute to come up, the 2,000 pods
# about as long to schedule; the whole stage takes a few minutes.
BENCH_CAPACITY_DIR   ?= $(CURDIR)/.cluster-bench-capacity
CAPACITY_NODES       ?= 5000
CAPACITY_PODS        ?= 2000
BENCH_CAPACITY_FLAGS ?=

.PHONY: bench-capacity
bench-capacity: build $(LOCALCLUSTER) ## kubectl-tao capacity vs kubectl get nodes + get pods -A on 5,000 nodes and 2,000 GPU pods (a few minutes)
	@rc=0; \
	$(LOCALCLUSTER) up --state-dir '$(BENCH_CAPACITY_DIR)' --nodes $(CAPACITY_NODES) --gpus-per-node 8 --timeout 10m || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  KUBECONFIG='$(BENCH_CAPACITY_DIR)/kubeconfig' $(GO) run ./test/bench/capacitybench -tao '$(CURDIR)/bin/kubectl-tao' \
	    -nodes $(CAPACITY_NODES) -pods $(CAPACITY_PODS) $(BENCH_CAPACITY_FLAGS) || rc=$$?; \
	fi; \
	$(LOCALCLUSTER) down --state-dir '$(BENCH_CAPACITY_DIR)' || true; \
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
cluster-up: $(LOCALCLUSTER) ## Start (or reuse) the local GPU cluster (REAL_NODE=1: with a real kubelet node); kubeconfig in .cluster/kubeconfig
	$(LOCALCLUSTER) up --state-dir '$(CLUSTER_DIR)' --nodes $(GPU_NODES) --gpus-per-node $(GPUS_PER_NODE) --real-node=$(or $(REAL_NODE),0)

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

# ---------------------------------------------------------------------------------------------
# Release archives, krew manifest, completion, reference docs and CI quality gates.

DIST_DIR       ?= dist
DIST_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
# Every archive entry carries the commit's time, so two builds of one commit are identical.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
RELEASE_TOOL   := bin/release
KUBECTL        ?= kubectl
# Tools are built by `go install` at pinned versions, once per machine, next to the local
# cluster's binaries: <cache>/kubectl-tao/tools/<name>-<version>/<name>.
TOOLS_DIR      ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kubectl-tao/tools
KREW_VERSION          := v0.4.3
GOLANGCI_LINT_VERSION := v2.15.0
GOVULNCHECK_VERSION   := v1.9.0
# The Go vulnerability database as a Go module (golang.org/x/vulndb, served by the module
# proxy): its OSV files are indexed into a local database so govulncheck runs offline.
VULNDB_VERSION        := v0.0.0-20261105234957-e22db6528018
KREW                   := $(TOOLS_DIR)/krew-$(KREW_VERSION)/krew
VALIDATE_KREW_MANIFEST := $(TOOLS_DIR)/validate-krew-manifest-$(KREW_VERSION)/validate-krew-manifest
# Tools that load the standard library's source are built with the Go of the code they read.
GOLANGCI_LINT          := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)-$(GO_TOOLCHAIN)/golangci-lint
GOVULNCHECK            := $(TOOLS_DIR)/govulncheck-$(GOVULNCHECK_VERSION)-$(GO_TOOLCHAIN)/govulncheck
INDEXDB                := $(TOOLS_DIR)/indexdb-$(VULNDB_VERSION)/indexdb
VULNDB_DIR             := $(TOOLS_DIR)/vulndb-$(VULNDB_VERSION)

$(RELEASE_TOOL): FORCE
	@$(GO) build -o $@ ./internal/release/cmd/release

.PHONY: dist
dist: $(RELEASE_TOOL) ## Cross-compile the release archives and sha256sums.txt into dist/ (reproducible)
	@rm -rf '$(DIST_DIR)'; mkdir -p '$(DIST_DIR)/.build'
	@for p in $(DIST_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; exe=; script=pkg/plugin/completion/kubectl_complete-tao; sname=kubectl_complete-tao; \
	  if [ "$$os" = windows ]; then exe=.exe; script=$$script.cmd; sname=$$sname.cmd; fi; \
	  echo "dist: $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
	    -o '$(DIST_DIR)'/.build/$${os}_$$arch/kubectl-tao$$exe ./cmd/kubectl-tao; \
	  $(RELEASE_TOOL) pack -out '$(DIST_DIR)'/kubectl-tao_$${os}_$$arch.tar.gz -mtime $(SOURCE_DATE_EPOCH) \
	    kubectl-tao$$exe='$(DIST_DIR)'/.build/$${os}_$$arch/kubectl-tao$$exe:755 LICENSE=LICENSE:644 $$sname=$$script:755; \
	done
	@rm -rf '$(DIST_DIR)/.build'
	$(RELEASE_TOOL) sums -dir '$(DIST_DIR)'
	@cat '$(DIST_DIR)/sha256sums.txt'

.PHONY: dist-check
dist-check: ## Build the archives twice and fail unless both builds are byte-identical
	$(MAKE) --no-print-directory dist
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory dist DIST_DIR="$$tmp/dist" >/dev/null; \
	if ! cmp -s '$(DIST_DIR)/sha256sums.txt' "$$tmp/dist/sha256sums.txt"; then \
	  echo "dist is not reproducible:"; diff '$(DIST_DIR)/sha256sums.txt' "$$tmp/dist/sha256sums.txt"; exit 1; fi; \
	echo "dist: reproducible (two builds, identical sha256sums.txt)"

# The stager image (S3 staging's init container): FROM scratch, the static binary at /kubectl-tao.
STAGER_IMAGE     ?= ghcr.io/kubectl-tao/kubectl-tao:$(VERSION)
STAGER_PLATFORMS ?= linux/amd64 linux/arm64
STAGER_ARCHIVE   ?= bin/kubectl-tao-stager.oci.tar

.PHONY: stager-image
stager-image: $(RELEASE_TOOL) ## Build the stager image (FROM scratch, static binary at /kubectl-tao) as an OCI archive, without docker
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; bins=; \
	for p in $(STAGER_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; echo "stager-image: $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o "$$tmp/$${os}_$$arch" ./cmd/kubectl-tao; \
	  bins="$$bins $$p=$$tmp/$${os}_$$arch"; \
	done; \
	$(RELEASE_TOOL) oci-image -out '$(STAGER_ARCHIVE)' -ref '$(STAGER_IMAGE)' -version '$(VERSION)' -mtime $(SOURCE_DATE_EPOCH) $$bins
	@echo "stager-image: $(STAGER_ARCHIVE) ($(STAGER_IMAGE), $(STAGER_PLATFORMS)); push it with"
	@echo "  skopeo copy --all oci-archive:$(STAGER_ARCHIVE) docker://$(STAGER_IMAGE)"

.PHONY: krew-manifest
krew-manifest: $(RELEASE_TOOL) ## Render krew/tao.yaml from .krew.yaml for $(VERSION) and the archives in dist/
	@test -f '$(DIST_DIR)/kubectl-tao_linux_amd64.tar.gz' || { echo "no archives in $(DIST_DIR)/: run 'make dist' first"; exit 1; }
	$(RELEASE_TOOL) krew-manifest -template .krew.yaml -tag '$(VERSION)' -dist '$(DIST_DIR)' -out krew/tao.yaml

$(KREW):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)

$(VALIDATE_KREW_MANIFEST):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install sigs.k8s.io/krew/cmd/validate-krew-manifest@$(KREW_VERSION)

.PHONY: krew-check
krew-check: krew-manifest $(KREW) $(VALIDATE_KREW_MANIFEST) ## Validate krew/tao.yaml and install it offline with krew; run `kubectl tao version` through kubectl
	$(VALIDATE_KREW_MANIFEST) -manifest krew/tao.yaml -skip-install
	@root=$$(mktemp -d); trap 'rm -rf "$$root"' EXIT; \
	git init -q "$$root/index/default"; \
	mkdir -p "$$root/tools"; ln -s '$(KREW)' "$$root/tools/kubectl-krew"; \
	export KREW_ROOT="$$root" KREW_NO_UPGRADE_CHECK=1 PATH="$$root/bin:$$root/tools:$$PATH"; \
	$(KUBECTL) krew install --manifest=krew/tao.yaml --archive='$(DIST_DIR)/kubectl-tao_linux_amd64.tar.gz'; \
	out=$$($(KUBECTL) tao version); echo "$$out"; \
	case "$$out" in "kubectl-tao $(VERSION) "*) ;; *) echo "krew-check: want version $(VERSION)"; exit 1;; esac; \
	eval "$$($(KUBECTL) tao completion kubectl)"; \
	comp=$$($(KUBECTL) __complete tao vers 2>/dev/null); \
	case "$$comp" in version*) ;; *) echo "krew-check: kubectl __complete tao vers answered: $$comp"; exit 1;; esac; \
	$(KUBECTL) krew list | grep -Eqx '(detached/)?tao'; \
	$(KUBECTL) krew uninstall tao; \
	echo "krew-check: installed, ran and completed kubectl tao $(VERSION) through $$($(KUBECTL) version --client 2>/dev/null | head -1)"

.PHONY: docs
docs: ## Regenerate the command reference in docs/reference/
	$(GO) test ./internal/docgen -run TestReferenceDocs -count=1 -update

$(GOLANGCI_LINT):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(GOVULNCHECK):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(INDEXDB):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION)

$(VULNDB_DIR)/index/db.json: | $(INDEXDB)
	@src=$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	test -d "$$src/data/osv" || { echo "golang.org/x/vulndb@$(VULNDB_VERSION) has no data/osv"; exit 1; }; \
	rm -rf '$(VULNDB_DIR).tmp'; $(INDEXDB) -vulns "$$src/data/osv" -out '$(VULNDB_DIR).tmp'; \
	rm -rf '$(VULNDB_DIR)'; mv '$(VULNDB_DIR).tmp' '$(VULNDB_DIR)'

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml)
	$(GOLANGCI_LINT) run ./...

.PHONY: tidy-check
tidy-check: ## Fail if `go mod tidy` would change go.mod or go.sum
	@$(GO) mod tidy -diff || { echo "run 'go mod tidy'"; exit 1; }

.PHONY: vulncheck
vulncheck: $(GOVULNCHECK) $(VULNDB_DIR)/index/db.json ## govulncheck (offline database from golang.org/x/vulndb); fails on called vulnerabilities in required modules
	@$(GO) build -o bin/vulngate ./internal/vulngate
	$(GOVULNCHECK) -db 'file://$(VULNDB_DIR)' -format json ./... | bin/vulngate

.PHONY: race
race: ## Run the unit tests with the race detector
	CGO_ENABLED=1 $(GO) test -race ./pkg/... ./internal/...

.PHONY: ci-checks
ci-checks: lint golangci-lint tidy-check vulncheck race ## The CI quality gates: gofmt, vet, golangci-lint, go mod tidy, govulncheck, race
