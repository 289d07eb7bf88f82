# kubectl-tao: `make help` lists the targets. The two a newcomer needs: `make demo`, `make test`.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
# The Go release every target builds and tests with, whatever Go the machine has: go1.26.8 has
# standard-library vulnerabilities on paths every TLS client takes (crypto/x509, net/http; see
# `make vulncheck`), fixed in later releases. The go command fetches this one once from the Go
# module proxy and caches it. `go` run by hand uses the machine's own Go.
GO_TOOLCHAIN := go1.27.3
export GOTOOLCHAIN := $(GO_TOOLCHAIN)
PKG         := github.com/kubectl-tao/kubectl-tao
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null | sed 's/^\([0-9a-f]\{7,\}\)/v0.0.0-\1/' || echo v0.0.0-dev)
COMMIT      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The commit's date, not the clock's, so that two builds of one commit are identical.
BUILD_DATE  ?= $(shell git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)
LDFLAGS     := -s -w \
  -X $(PKG)/pkg/plugin/cmd/version.version=$(VERSION) \
  -X $(PKG)/pkg/plugin/cmd/version.commit=$(COMMIT) \
  -X $(PKG)/pkg/plugin/cmd/version.buildDate=$(BUILD_DATE)

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
# The real node's MIG slices (test/localcluster/README.md): one more GPU, in MIG mode, cut into
# that many nvidia.com/mig-1g.10gb beside its 8 whole GPUs, the MIG mixed strategy. `make e2e`
# defaults to 2, so TestRealNodeMIG runs on the suite's node without restarting it; `make
# cluster-up` to 0 (whole GPUs only, the node as it always was).
REAL_NODE_MIG_SLICES ?=
REAL_NODE_ON  := $(if $(filter 1 true on,$(REAL_NODE_E2E)),1,$(if $(filter auto,$(REAL_NODE_E2E)),$(if $(filter 0,$(shell id -u 2>/dev/null)),$(filter Linux,$(shell uname -s)))))
# The Kubernetes release the local cluster builds and runs (test/localcluster/README.md): any
# v1.MINOR.PATCH from 1.28 to the newest, which is the default. Every target that builds or
# starts a cluster passes it to the launcher; a release not built yet costs a cold build.
KUBERNETES_VERSION ?=
KUBE_VERSION_FLAG  := $(if $(KUBERNETES_VERSION),--kubernetes-version '$(KUBERNETES_VERSION)')
# Kueue (test/localcluster/README.md): KUEUE=1 makes `make cluster-up` also run Kueue's manager.
# `make e2e` builds it into the cache first; its queue tests add it to the cluster themselves
# (localcluster kueue-up) after checking what kubectl-tao does on a cluster without it.
KUEUE         ?= 0
# versitygw, a real S3 server (Apache-2.0) that the staging tests run on loopback. Set before the
# e2e rule, whose prerequisites make expands as it reads them.
VERSITYGW_VERSION := v1.8.0
VERSITYGW         := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kubectl-tao/tools/versitygw-$(VERSITYGW_VERSION)/versitygw

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: toolchain
toolchain: ## Fetch (once) and show the Go toolchain the targets use
	$(GO) version

.PHONY: build
build: ## Build bin/kubectl-tao
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kubectl-tao ./cmd/kubectl-tao

# Every test run goes through bin/testsummary (hack/testsummary): go test -json in, go test's
# usual output out (-v in E2E_FLAGS or FAULTS_FLAGS: all of it), then each skipped test and why;
# it fails on a failure, and under CI=true on a skip too. pipefail (.SHELLFLAGS) keeps go test's
# own exit code. TEST_SKIPS, when set, collects the skips of several runs: `make test` lists
# all its parts' skips at the end.
TESTSUMMARY := bin/testsummary
TEST_SKIPS  ?=
summary      = $(TESTSUMMARY)$(if $(filter -v,$(1)), -v)$(if $(TEST_SKIPS), -skips '$(TEST_SKIPS)')

$(TESTSUMMARY): FORCE
	@$(GO) build -o $@ ./hack/testsummary

.PHONY: test
test: TEST_SKIPS = $(CURDIR)/bin/test-skips.txt
test: test-skips-reset unit e2e e2e-faults-ci ## Run the unit tests, then the end-to-end suite on the local cluster, then the fault tests on their own (what CI runs); lists every skipped test at the end
	@$(TESTSUMMARY) -list '$(TEST_SKIPS)'

.PHONY: test-skips-reset
test-skips-reset: $(TESTSUMMARY)
	@rm -f '$(TEST_SKIPS)'

# The plugin's unit tests run under the race detector wherever cgo can build it, with the very
# command of `make race` (RACE_TEST): in CI, which runs that first as a gate, they then come from
# go test's cache instead of being built and run a second time without it (minutes on a cold
# machine). Evaluated only when used: `go env` may fetch the toolchain.
PLUGIN_PKGS := ./pkg/... ./hack/...
RACE_TEST    = CGO_ENABLED=1 $(GO) test -json -race $(PLUGIN_PKGS)
RACE_ON      = $(filter 1,$(shell $(GO) env CGO_ENABLED 2>/dev/null))

.PHONY: unit
unit: $(TESTSUMMARY) ## Run the unit tests (the plugin's under the race detector where cgo is available)
	$(if $(RACE_ON),$(RACE_TEST),$(GO) test -json $(PLUGIN_PKGS)) | $(call summary)
	$(GO) test -json ./cmd/... ./test/... | $(call summary)

# The e2e suite runs the plugin through kubectl: the one on PATH, or on a machine without one,
# kubectl of the cluster's Kubernetes version that the launcher builds into its cache.
KUBECTL_ON_PATH := $(shell command -v kubectl 2>/dev/null)
E2E_PATH         = $(if $(KUBECTL_ON_PATH),,PATH="$$(dirname "$$($(LOCALCLUSTER) build --kubectl $(KUBE_VERSION_FLAG) | grep '/kubectl$$')")":"$$PATH" )

.PHONY: e2e
e2e: STAGER_PLATFORMS = linux/$(shell $(GO) env GOARCH)
e2e: build $(LOCALCLUSTER) $(TESTSUMMARY) $(VERSITYGW) $(if $(REAL_NODE_ON),stager-image) ## Bring the local cluster up, run the e2e suite against it, bring it down
	$(if $(REAL_NODE_PRE),$(GO) test -json -tags e2e -count=1 -timeout 30m -run '^TestRealNode$$' ./test/localcluster/ | $(call summary))
	$(LOCALCLUSTER) build --kueue $(if $(KUBECTL_ON_PATH),,--kubectl) $(KUBE_VERSION_FLAG) >/dev/null
	$(E2E_PATH)LOCALCLUSTER='$(LOCALCLUSTER)' hack/with-cluster.sh '$(CLUSTER_DIR)' --nodes $(GPU_NODES) --gpus-per-node $(GPUS_PER_NODE) --real-node=$(REAL_NODE_E2E) --real-node-mig-slices $(or $(REAL_NODE_MIG_SLICES),2) --kueue=0 $(KUBE_VERSION_FLAG) -- \
	  env KUBECTL_TAO='$(CURDIR)/bin/kubectl-tao' VERSITYGW='$(VERSITYGW)' \
	  LOCALCLUSTER='$(CURDIR)/$(LOCALCLUSTER)' LOCALCLUSTER_STATE_DIR='$(CLUSTER_DIR)' \
	  $(LOCALCLUSTER) exec --state-dir '$(CLUSTER_DIR)' -- $(GO) test -json -tags e2e -count=1 -timeout 45m $(E2E_FLAGS) ./test/... \
	  | $(call summary,$(E2E_FLAGS))

# The compatibility matrix (docs/compat.md): TestCompat, the e2e suite's compatibility subset, on
# a local cluster of each Kubernetes minor in COMPAT_MINORS (the newest patch the module proxy
# serves), one after another, then the table feature x release, also in bin/compat-table.md
# (hack/e2e-compat.sh). Not in CI: a release not built yet costs a cold build of its control plane.
COMPAT_MINORS ?= 1.28 1.29 1.31 1.32 1.33 1.35 1.37

.PHONY: e2e-compat
e2e-compat: $(LOCALCLUSTER) ## Run the compatibility subset of the e2e suite on each Kubernetes minor of COMPAT_MINORS and print the table feature x release
	GO='$(GO)' MAKE='$(MAKE)' LOCALCLUSTER='$(CURDIR)/$(LOCALCLUSTER)' COMPAT_MINORS='$(COMPAT_MINORS)' hack/e2e-compat.sh

# The fault tests (test/faults) stop and start the control plane, so they run on a cluster of
# their own, never the one `make e2e` shares: an API-server restart and a 30 s outage under
# `logs -f` of 64 ranks, `wait` and `submit --follow`; `top -w` through a 30 s outage; 429 and
# 503 bursts from test/faultproxy. FAULTS_FLAGS passes go test flags (-run, -v).
FAULTS_CLUSTER_DIR ?= $(CURDIR)/.cluster-faults
FAULTS_FLAGS       ?=

.PHONY: e2e-faults-ci
e2e-faults-ci: build $(LOCALCLUSTER) $(TESTSUMMARY) ## The fault tests CI runs (API-server restart and outage, 429/503 bursts) on a cluster of their own
	LOCALCLUSTER='$(LOCALCLUSTER)' hack/with-cluster.sh '$(FAULTS_CLUSTER_DIR)' --nodes 4 --gpus-per-node 8 $(KUBE_VERSION_FLAG) -- \
	  env KUBECTL_TAO='$(CURDIR)/bin/kubectl-tao' TAO_FAULT_CLUSTER='$(FAULTS_CLUSTER_DIR)' \
	  $(GO) test -json -tags faults -count=1 -timeout 20m -skip '^TestHeavy' $(FAULTS_FLAGS) ./test/faults/ \
	  | $(call summary,$(FAULTS_FLAGS))

# The heavy fault tests: a 1,000-rank job (pods without GPUs) followed by `logs -f`, its API
# requests counted; the cluster has room for 1,320 pods. Run it before changing tail or the
# follow path. kwok takes one inotify instance per followed log: the host needs
# fs.inotify.max_user_instances of at least 1,200, which localcluster up sets where it may
# (root), or says how (the test says so too).
FAULTS_HEAVY_CLUSTER_DIR ?= $(CURDIR)/.cluster-faults-heavy

.PHONY: e2e-faults
e2e-faults: build $(LOCALCLUSTER) $(TESTSUMMARY) $(VERSITYGW) ## The heavy fault tests (1,000-rank logs -f) on a cluster of their own, then e2e-faults-ci
	LOCALCLUSTER='$(LOCALCLUSTER)' hack/with-cluster.sh '$(FAULTS_HEAVY_CLUSTER_DIR)' --nodes 12 --gpus-per-node 8 $(KUBE_VERSION_FLAG) -- \
	  env KUBECTL_TAO='$(CURDIR)/bin/kubectl-tao' TAO_FAULT_CLUSTER='$(FAULTS_HEAVY_CLUSTER_DIR)' \
	  $(GO) test -json -tags faults -count=1 -timeout 40m -run '^TestHeavy' -v $(FAULTS_FLAGS) ./test/faults/ \
	  | $(call summary,-v)
	$(MAKE) --no-print-directory e2e-faults-ci

# versitygw is built once per machine into the tools cache: a cold build takes minutes.
$(VERSITYGW):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Install versitygw (the S3 server of the staging tests) into the tools cache

# rclone, what the S3 benchmarks compare with, built once per machine into
# the tools cache from the module proxy like the other test tools (a big build: many minutes).
RCLONE_VERSION := v1.76.0
RCLONE         := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kubectl-tao/tools/rclone-$(RCLONE_VERSION)/rclone
$(RCLONE):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install github.com/rclone/rclone@$(RCLONE_VERSION)

.PHONY: rclone
rclone: $(RCLONE) ## Install rclone (what make bench-s3 compares with) into the tools cache

# The benchmark cluster: 64 one-GPU ranks need 64 GPUs.
BENCH_CLUSTER_DIR ?= $(CURDIR)/.cluster-bench
BENCH_FLAGS       ?=

.PHONY: bench
bench: build $(LOCALCLUSTER) ## Go benchmarks, kubectl vs kubectl-tao (logs, status) on the local cluster, then bench-capacity, bench-scale and bench-s3 (docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./...
	LOCALCLUSTER='$(LOCALCLUSTER)' hack/with-cluster.sh '$(BENCH_CLUSTER_DIR)' --nodes 8 --gpus-per-node 8 $(KUBE_VERSION_FLAG) -- \
	  $(GO) run ./test/bench/logsbench -tao '$(CURDIR)/bin/kubectl-tao' $(BENCH_FLAGS)
	$(MAKE) --no-print-directory bench-capacity
	$(MAKE) --no-print-directory bench-scale
	$(MAKE) --no-print-directory bench-s3

BENCH_S3_FLAGS ?=

.PHONY: bench-s3
bench-s3: build $(VERSITYGW) $(RCLONE) ## submit --workdir vs tar | zstd + rclone copy, results --download and a checkpoint unit's upload and restore vs rclone copy, on a local S3 server (no cluster)
	VERSITYGW='$(VERSITYGW)' $(GO) run ./test/bench/s3bench -tao '$(CURDIR)/bin/kubectl-tao' -rclone '$(RCLONE)' $(BENCH_S3_FLAGS)

# The capacity benchmark's cluster: 5,000 nodes and 2,000 pods, which take a few minutes to come
# up and schedule.
BENCH_CAPACITY_DIR   ?= $(CURDIR)/.cluster-bench-capacity
CAPACITY_NODES       ?= 5000
CAPACITY_PODS        ?= 2000
BENCH_CAPACITY_FLAGS ?=

.PHONY: bench-capacity
bench-capacity: build $(LOCALCLUSTER) ## kubectl-tao capacity vs kubectl get nodes + get pods -A on 5,000 nodes and 2,000 GPU pods (a few minutes)
	LOCALCLUSTER='$(LOCALCLUSTER)' hack/with-cluster.sh '$(BENCH_CAPACITY_DIR)' --nodes $(CAPACITY_NODES) --gpus-per-node 8 --timeout 10m $(KUBE_VERSION_FLAG) -- \
	  $(GO) run ./test/bench/capacitybench -tao '$(CURDIR)/bin/kubectl-tao' \
	  -nodes $(CAPACITY_NODES) -pods $(CAPACITY_PODS) $(BENCH_CAPACITY_FLAGS)

# The 1,000-rank benchmark's cluster: room for 1,320 pods (the job, then one job at a time for
# each cancel run). kwok serves each followed log with an inotify instance of its own: the host
# needs fs.inotify.max_user_instances of at least 1,200 for the logs -f part.
BENCH_SCALE_DIR   ?= $(CURDIR)/.cluster-bench-scale
BENCH_SCALE_FLAGS ?=

.PHONY: bench-scale
bench-scale: build $(LOCALCLUSTER) ## kubectl-tao vs kubectl on a 1,000-rank job: logs, logs -f, cancel (tens of minutes)
	LOCALCLUSTER='$(LOCALCLUSTER)' hack/with-cluster.sh '$(BENCH_SCALE_DIR)' --nodes 12 --gpus-per-node 8 --timeout 10m $(KUBE_VERSION_FLAG) -- \
	  $(GO) run ./test/bench/scalebench -tao '$(CURDIR)/bin/kubectl-tao' $(BENCH_SCALE_FLAGS)

.PHONY: lint
lint: ## Check formatting and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/...
	$(GO) vet -tags faults ./test/faults/

.PHONY: fmt
fmt: ## Format the Go sources
	gofmt -w $$(git ls-files '*.go')

$(LOCALCLUSTER): FORCE
	@$(GO) build -o $@ ./test/localcluster/cmd/localcluster

.PHONY: cluster-build
cluster-build: $(LOCALCLUSTER) ## Build (once per machine and KUBERNETES_VERSION) the local cluster's binaries into the user cache
	$(LOCALCLUSTER) build $(KUBE_VERSION_FLAG)

.PHONY: cluster-up
cluster-up: $(LOCALCLUSTER) ## Start (or reuse) the local GPU cluster (REAL_NODE=1: with a real kubelet node; KUEUE=1: with Kueue; KUBERNETES_VERSION=v1.31.14: that release); kubeconfig in .cluster/kubeconfig
	$(LOCALCLUSTER) up --state-dir '$(CLUSTER_DIR)' --nodes $(GPU_NODES) --gpus-per-node $(GPUS_PER_NODE) --real-node=$(REAL_NODE_UP) --real-node-mig-slices $(or $(REAL_NODE_MIG_SLICES),0) --kueue=$(KUEUE) $(KUBE_VERSION_FLAG)

.PHONY: cluster-down
cluster-down: $(LOCALCLUSTER) ## Stop the local cluster and remove its state
	$(LOCALCLUSTER) down --state-dir '$(CLUSTER_DIR)'

.PHONY: demo
# cluster-up leaves the real node out unless asked; the demo shows it wherever the host allows.
REAL_NODE_UP = $(or $(REAL_NODE),0)
demo: REAL_NODE_UP = $(or $(REAL_NODE),auto)
# The real node's training part needs the stager image (imported at up), versitygw and the
# demo's S3 server.
demo: STAGER_PLATFORMS = linux/$(shell $(GO) env GOARCH)
demo: build $(if $(REAL_NODE_ON),stager-image $(VERSITYGW) demo-s3) cluster-up ## Bring the local cluster up and run a multi-node GPU job through the plugin (and real training on the real node where the host allows)
	@PATH='$(CURDIR)/bin':"$$PATH" KUBECONFIG='$(CLUSTER_DIR)/kubeconfig' VERSITYGW='$(VERSITYGW)' test/demo/demo.sh

.PHONY: demo-s3
demo-s3:
	@$(GO) build -o bin/demo-s3 ./test/demo/s3

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
	@$(GO) build -o $@ ./hack/release/cmd/release

# What hack/dist.sh and hack/stager-image.sh build with.
RELEASE_ENV = GO='$(GO)' LDFLAGS='$(LDFLAGS)' VERSION='$(VERSION)' SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' \
  RELEASE_TOOL='$(RELEASE_TOOL)' DIST_DIR='$(DIST_DIR)' DIST_PLATFORMS='$(DIST_PLATFORMS)'

.PHONY: dist
dist: $(RELEASE_TOOL) ## Cross-compile the release archives and sha256sums.txt into dist/ (reproducible)
	$(RELEASE_ENV) hack/dist.sh

.PHONY: dist-check
dist-check: $(RELEASE_TOOL) ## Build the archives twice and fail unless both builds are byte-identical
	$(RELEASE_ENV) hack/dist-check.sh

# The stager image (S3 staging's init container): FROM scratch, the static binary at /kubectl-tao.
STAGER_IMAGE     ?= ghcr.io/kubectl-tao/kubectl-tao:$(VERSION)
STAGER_PLATFORMS ?= linux/amd64 linux/arm64
STAGER_ARCHIVE   ?= bin/kubectl-tao-stager.oci.tar

.PHONY: stager-image
stager-image: $(RELEASE_TOOL) ## Build the stager image (FROM scratch, static binary at /kubectl-tao) as an OCI archive, without docker
	$(RELEASE_ENV) STAGER_IMAGE='$(STAGER_IMAGE)' STAGER_PLATFORMS='$(STAGER_PLATFORMS)' STAGER_ARCHIVE='$(STAGER_ARCHIVE)' \
	  hack/stager-image.sh

# The committed krew manifest: krew/tao.yaml, for the release in krew/release-version.
.PHONY: krew-manifest
krew-manifest: $(RELEASE_TOOL) ## Render the committed krew/tao.yaml from .krew.yaml for the version in krew/release-version
	RELEASE_TOOL='$(RELEASE_TOOL)' hack/krew-manifest.sh

.PHONY: krew-manifest-check
krew-manifest-check: $(RELEASE_TOOL) ## Fail unless krew/tao.yaml is what .krew.yaml renders for krew/release-version
	RELEASE_TOOL='$(RELEASE_TOOL)' hack/krew-manifest.sh -check

$(KREW):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)

$(VALIDATE_KREW_MANIFEST):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install sigs.k8s.io/krew/cmd/validate-krew-manifest@$(KREW_VERSION)

.PHONY: krew-check
krew-check: $(RELEASE_TOOL) $(KREW) $(VALIDATE_KREW_MANIFEST) ## Render dist/krew/tao.yaml from .krew.yaml and dist/ (make dist first), validate it, install it offline with krew, run `kubectl tao version` through kubectl
	VERSION='$(VERSION)' DIST_DIR='$(DIST_DIR)' RELEASE_TOOL='$(RELEASE_TOOL)' KREW='$(KREW)' \
	  VALIDATE_KREW_MANIFEST='$(VALIDATE_KREW_MANIFEST)' KUBECTL='$(KUBECTL)' hack/krew-check.sh

.PHONY: docs
docs: ## Regenerate the command reference in docs/reference/
	$(GO) test ./hack/docgen -run TestReferenceDocs -count=1 -update

$(GOLANGCI_LINT):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(GOVULNCHECK):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(INDEXDB):
	GOBIN='$(@D)' CGO_ENABLED=0 $(GO) install golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION)

$(VULNDB_DIR)/index/db.json: | $(INDEXDB)
	GO='$(GO)' INDEXDB='$(INDEXDB)' VULNDB_VERSION='$(VULNDB_VERSION)' VULNDB_DIR='$(VULNDB_DIR)' hack/vulndb.sh

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml)
	# Without --allow-parallel-runners a second golangci-lint on the machine (another checkout,
	# a CI run beside a developer's) fails at once on a lock file in /tmp that all share.
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: tidy-check
tidy-check: ## Fail if `go mod tidy` would change go.mod or go.sum
	@$(GO) mod tidy -diff || { echo "run 'go mod tidy'"; exit 1; }

.PHONY: vulncheck
vulncheck: $(GOVULNCHECK) $(VULNDB_DIR)/index/db.json ## govulncheck (offline database from golang.org/x/vulndb); fails on called vulnerabilities in required modules
	@$(GO) build -o bin/vulngate ./hack/vulngate
	$(GOVULNCHECK) -db 'file://$(VULNDB_DIR)' -format json ./... | bin/vulngate

.PHONY: race
race: $(TESTSUMMARY) ## Run the unit tests with the race detector
	$(RACE_TEST) | $(call summary)

# The README is for users; the rest is in docs/ (hack/readme-check.sh).
README_MAX_BYTES ?= 16384

.PHONY: readme-check
readme-check: ## Fail if README.md is larger than README_MAX_BYTES (16 KB)
	README_MAX_BYTES='$(README_MAX_BYTES)' hack/readme-check.sh

# Every fuzz target (func FuzzX in a _test.go file), one after the other (hack/fuzz.sh).
FUZZ_SHORT_TIME ?= 3s
FUZZ_TIME       ?= 1m

.PHONY: fuzz-short
fuzz-short: ## Run each fuzz target for FUZZ_SHORT_TIME (3s; part of ci-checks)
	GO='$(GO)' FUZZ_TIME='$(FUZZ_SHORT_TIME)' hack/fuzz.sh

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZ_TIME (1m; FUZZ_TIME=10m for a longer hunt)
	GO='$(GO)' FUZZ_TIME='$(FUZZ_TIME)' hack/fuzz.sh

.PHONY: ci-checks
ci-checks: lint golangci-lint tidy-check vulncheck race fuzz-short krew-manifest-check readme-check ## The CI quality gates: gofmt, vet, golangci-lint, go mod tidy, govulncheck, race, fuzz-short, krew/tao.yaml, README size

.PHONY: ci-warm
ci-warm: ## Fill the caches later CI steps need (cluster binaries, release platforms, krew's tools); .ci/run runs it in the background
	$(RELEASE_ENV) REAL_NODE='$(if $(REAL_NODE_ON),1,0)' hack/ci-warm.sh
	$(MAKE) --no-print-directory $(KREW) $(VALIDATE_KREW_MANIFEST)
