SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO ?= go
# Packages Debian must provide for the tests: real Redis servers,
# docker-compose (to check docker-compose.yml), curl (the HTTP/JSON
# examples of docs/), chromium (the admin page's browser test) and
# prometheus (its promtool checks the alert rules and dashboard of deploy/).
# valkey-server comes from bookworm-backports (valkey-deps).
APT_PACKAGES := redis-server redis-tools docker-compose curl chromium prometheus
# Debian packages the Java client builds and tests with: grpc-java and
# protobuf jars, netty-tcnative (TLS with ALPN on Debian's netty), protoc with
# the grpc-java plugin, JUnit 5, Maven's model builder (to read pom.xml) and
# openssl for the TLS tests. Maven Central is out of reach; see
# clients/java/README.md.
JAVA_APT_PACKAGES := protobuf-compiler protobuf-compiler-grpc-java-plugin libprotobuf-dev \
  libgrpc-java libprotobuf-java libgoogle-common-protos-java libguava-java libnetty-java \
  libperfmark-java libgoogle-gson-java libjsr305-java libgeronimo-annotation-1.3-spec-java \
  libnetty-tcnative-java libnetty-tcnative-jni maven junit5 openssl
# Debian packages the Python client builds and tests with (/usr/bin/python3,
# never a python3 from PATH): grpcio and protobuf, setuptools, wheel, pip and
# venv to build and install its wheel, protoc with grpc_python_plugin to
# generate its stubs, and openssl for the TLS tests. PyPI is out of reach.
PYTHON_APT_PACKAGES := python3 python3-grpcio python3-protobuf python3-setuptools python3-wheel \
  python3-pip python3-venv protobuf-compiler protobuf-compiler-grpc openssl

# The Go modules of this repository: lockd itself, the Go client and the
# generated messages it uses. The client and gen/ are modules of their own
# (a program using the client gets only what it uses); lockd uses them
# through replace directives. `go test ./...` from here does not enter them.
GO_MODULES := . client gen

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

# make run builds grpcurl beside lockd, in one go build, so that the first
# `go tool grpcurl` finds its packages compiled and only links it: one wait
# instead of two, and less work in all (on two cores: 376 s of CPU for both,
# then 4 s for go tool grpcurl's first run, against 305 s for lockd alone
# and then 126 s for go tool grpcurl's).
GRPCURL := github.com/fullstorydev/grpcurl/cmd/grpcurl

.PHONY: run
run: ## Build .bin/lockd (and grpcurl) when changed, then run lockd on its embedded store (127.0.0.1:50051), ready for grpcurl.
	@echo "building .bin/lockd and grpcurl (the first build takes a few minutes; later ones, seconds)"
	$(GO) build -o .bin/ ./cmd/lockd $(GRPCURL)
	.bin/lockd $(ARGS)

.PHONY: build
build: .bin/lockd .bin/wechat-fake ## Build .bin/lockd (the server and the CLI) and .bin/wechat-fake (a fake WeChat).

.PHONY: test
test: deps valkey-deps python-deps lint ## Install what is missing, then run every test (with -race) against real Redis.
	$(GO) test -race -count=1 -timeout 20m ./...
	@$(MAKE) test-deploy test-valkey test-go-client test-java test-node test-python test-examples

.PHONY: test-deploy
test-deploy: deps ## Check deploy/'s Prometheus config and alert rules; run the rules' promtool unit tests.
	cd deploy/prometheus && promtool check config prometheus.yml && promtool test rules lockd-alerts.test.yml

.PHONY: test-valkey
test-valkey: valkey-deps ## Run the engine's, the rate limiter's and the token broker's suites on Valkey (single, Sentinel, Cluster).
	REDISTEST_SERVER=valkey-server $(GO) test -race -count=1 -timeout 20m ./internal/redislock/ ./internal/ratelimit/ ./internal/token/

.PHONY: test-go-client
test-go-client: .bin/lockd ## Run the Go client module's tests and examples against a lockd process.
	cd client && LOCKD_BIN=$(CURDIR)/.bin/lockd $(GO) test -race -count=1 -timeout 10m ./...

.PHONY: test-java
test-java: java-deps .bin/lockd .bin/wechat-fake ## Build the Java client and run its tests against lockd processes.
	LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake clients/java/build.sh test

.PHONY: test-node
test-node: node-deps .bin/lockd .bin/wechat-fake ## Run the Node client's tests against lockd processes.
	cd clients/node && LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake npm test

.PHONY: test-python
test-python: python-deps .bin/lockd .bin/wechat-fake ## Run the Python client's tests (Debian's python3) against lockd processes.
	cd clients/python && LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake \
	  /usr/bin/python3 -m unittest discover -s tests -t . -v

.PHONY: test-examples
test-examples: node-deps .bin/lockd .bin/wechat-fake ## Test the SDK examples (examples/): SDKs whose token cache lockd feeds, against lockd and the fake upstream.
	cd examples/wechat-go && $(GO) vet ./... && LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake $(GO) test -race -count=1 ./...
	cd examples/feishu-node && npm ci --no-audit --no-fund && LOCKD_BIN=$(CURDIR)/.bin/lockd WECHAT_FAKE_BIN=$(CURDIR)/.bin/wechat-fake npm test

# make run, make build and the client tests use these binaries; go build is
# a no-op when nothing changed.
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

.PHONY: valkey-deps
valkey-deps: ## Install valkey-server from Debian bookworm-backports when missing.
	@if ! command -v valkey-server >/dev/null; then \
	  echo "installing valkey-server from Debian bookworm-backports"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then \
	    echo 'deb http://deb.debian.org/debian bookworm-backports main' | \
	      $$sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null; \
	  fi; \
	  $$sudo apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends \
	    -t bookworm-backports valkey-server >/dev/null; \
	fi
	@valkey-server --version

.PHONY: python-deps
python-deps: deps ## Install the Debian packages the Python client needs when missing.
	@missing=(); \
	for p in $(PYTHON_APT_PACKAGES); do dpkg -s "$$p" >/dev/null 2>&1 || missing+=("$$p"); done; \
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
deps: ## Install redis-server, docker-compose, curl, chromium and promtool from Debian when missing.
	@missing=(); \
	command -v redis-server >/dev/null || missing+=(redis-server); \
	command -v promtool >/dev/null || missing+=(prometheus); \
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
generate: ## Regenerate gen/lockd/v1 (messages, gRPC stubs), internal/gw (HTTP gateway) and the Python client's stubs from proto/.
	$(GO) tool buf generate
	@if command -v grpc_python_plugin >/dev/null; then clients/python/generate.sh; \
	else echo "grpc_python_plugin missing (make python-deps): clients/python/lockd/v1 not regenerated"; fi

.PHONY: checkgenerate
checkgenerate: generate
	@if [ -n "$$(git status --porcelain -- gen internal/gw clients/python/lockd/v1)" ]; then \
	  echo "generated code is stale: run make generate and commit"; \
	  git status --porcelain -- gen internal/gw clients/python/lockd/v1; exit 1; fi

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
