SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO ?= go
# Packages Debian must provide for the tests: real Redis servers,
# docker-compose (to check docker-compose.yml), curl (the README's
# HTTP/JSON examples) and chromium (the admin page's browser test).
APT_PACKAGES := redis-server redis-tools docker-compose curl chromium
# Debian packages the Java client builds and tests with: grpc-java and
# protobuf jars, protoc with the grpc-java plugin, JUnit 5 (and openssl for
# the TLS tests). Maven Central is out of reach; see clients/java/README.md.
JAVA_APT_PACKAGES := protobuf-compiler protobuf-compiler-grpc-java-plugin libprotobuf-dev \
  libgrpc-java libprotobuf-java libgoogle-common-protos-java libguava-java libnetty-java \
  libperfmark-java libgoogle-gson-java libjsr305-java libgeronimo-annotation-1.3-spec-java \
  junit5 openssl

# The Go modules of this repository: lockd itself, the Go client and the
# generated messages it uses. The client and gen/ are modules of their own
# (a program using the client gets only what it uses); lockd uses them
# through replace directives. `go test ./...` from here does not enter them.
GO_MODULES := . client gen

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run lockd on its embedded store (127.0.0.1:50051), ready for grpcurl.
	$(GO) run ./cmd/lockd $(ARGS)

.PHONY: test
test: deps lint ## Install what is missing, then run every test (with -race) against real Redis.
	$(GO) test -race -count=1 -timeout 20m ./...
	@$(MAKE) test-go-client test-java test-node

.PHONY: test-go-client
test-go-client: .bin/lockd ## Run the Go client module's tests and examples against a lockd process.
	cd client && LOCKD_BIN=$(CURDIR)/.bin/lockd $(GO) test -race -count=1 -timeout 10m ./...

.PHONY: test-java
test-java: java-deps .bin/lockd .bin/wechat-fake ## Build the Java client and run its tests against lockd processes.
	LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake clients/java/build.sh test

.PHONY: test-node
test-node: node-deps .bin/lockd .bin/wechat-fake ## Run the Node client's tests against lockd processes.
	cd clients/node && LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake npm test

# The client tests run these binaries as processes; go build is a no-op when
# nothing changed.
.PHONY: .bin/lockd .bin/wechat-fake
.bin/lockd .bin/wechat-fake:
	$(GO) build -o $@ ./cmd/$(notdir $@)

.PHONY: java-deps
java-deps: deps ## Install the Debian packages the Java client needs when missing.
	@missing=(); \
	command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless); \
	for p in $(JAVA_APT_PACKAGES); do dpkg -s "$$p" >/dev/null 2>&1 || missing+=("$$p"); done; \
	if (( $${#missing[@]} )); then \
	  echo "installing $${missing[*]} from Debian"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends "$${missing[@]}" >/dev/null; \
	fi

.PHONY: node-deps
node-deps: deps ## Install the Node client's packages (npm ci, from package-lock.json).
	@if ! command -v npm >/dev/null; then \
	  echo "installing nodejs npm from Debian"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; \
	fi
	cd clients/node && npm ci --no-audit --no-fund

.PHONY: deps
deps: ## Install redis-server, docker-compose, curl and chromium from Debian when missing.
	@missing=(); \
	command -v redis-server >/dev/null || missing+=(redis-server); \
	command -v redis-cli >/dev/null || missing+=(redis-tools); \
	command -v docker-compose >/dev/null || missing+=(docker-compose); \
	command -v curl >/dev/null || missing+=(curl); \
	command -v chromium >/dev/null || missing+=(chromium); \
	if (( $${#missing[@]} )); then \
	  echo "installing $${missing[*]} from Debian"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends "$${missing[@]}" >/dev/null; \
	fi
	@redis-server --version

.PHONY: lint
lint: ## buf lint and format; go vet, gofmt and go mod tidy over every Go module; generated code current; compose syntax.
	$(GO) tool buf lint
	$(GO) tool buf format --diff --exit-code
	@for m in $(GO_MODULES); do \
	  echo "go vet, go mod tidy -diff: $$m"; \
	  (cd $$m && $(GO) vet ./... && $(GO) mod tidy -diff); \
	done
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(MAKE) checkgenerate
	@if command -v docker-compose >/dev/null; then docker-compose -f docker-compose.yml config -q && echo "docker-compose.yml: ok"; fi

.PHONY: generate
generate: ## Regenerate gen/lockd/v1 (messages, gRPC stubs) and internal/gw (HTTP gateway) from proto/.
	$(GO) tool buf generate

.PHONY: checkgenerate
checkgenerate: generate
	@if [ -n "$$(git status --porcelain -- gen internal/gw)" ]; then \
	  echo "generated code is stale: run make generate and commit"; git status --porcelain -- gen internal/gw; exit 1; fi

.PHONY: bench
bench: deps bench-deps ## Run the benchmarks (lockd beside etcd) and write BENCHMARKS.md; BENCH_LONG=1 adds the runs that take minutes.
	./scripts/bench.sh

.PHONY: bench-deps
bench-deps: ## Install etcd-server from Debian when missing: the benchmarks compare lockd with it.
	@if ! command -v etcd >/dev/null; then \
	  echo "installing etcd-server from Debian"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends etcd-server >/dev/null; \
	fi
	@etcd --version | awk 'NR == 1'

.PHONY: faults
faults: deps ## Run the fault-injection suite and write FAULTS.md.
	./scripts/faults.sh

.PHONY: chaos
chaos: deps ## Run the longer, heavier fault-injection suite and write FAULTS.md.
	LOCKD_FAULTS=chaos ./scripts/faults.sh

.PHONY: fuzz
fuzz: ## Fuzz key validation and config parsing, a minute each.
	$(GO) test -run '^$$' -fuzz FuzzValidateKey -fuzztime 60s ./internal/redislock/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/config/
