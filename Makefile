SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO ?= go
# Packages Debian must provide for the tests: real Redis servers and
# docker-compose (to check docker-compose.yml).
APT_PACKAGES := redis-server redis-tools docker-compose

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run lockd on its embedded store (127.0.0.1:50051), ready for grpcurl.
	$(GO) run ./cmd/lockd $(ARGS)

.PHONY: test
test: deps lint ## Install what is missing, then run every test (with -race) against real Redis.
	$(GO) test -race -count=1 -timeout 20m ./...

.PHONY: deps
deps: ## Install redis-server and docker-compose from Debian when missing.
	@missing=(); \
	command -v redis-server >/dev/null || missing+=(redis-server); \
	command -v redis-cli >/dev/null || missing+=(redis-tools); \
	command -v docker-compose >/dev/null || missing+=(docker-compose); \
	if (( $${#missing[@]} )); then \
	  echo "installing $${missing[*]} from Debian"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends "$${missing[@]}" >/dev/null; \
	fi
	@redis-server --version

.PHONY: lint
lint: ## buf lint and format, go vet, gofmt, generated code current, compose syntax.
	$(GO) tool buf lint
	$(GO) tool buf format --diff --exit-code
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@$(MAKE) checkgenerate
	@if command -v docker-compose >/dev/null; then docker-compose -f docker-compose.yml config -q && echo "docker-compose.yml: ok"; fi

.PHONY: generate
generate: ## Regenerate gen/ from proto/.
	$(GO) tool buf generate

.PHONY: checkgenerate
checkgenerate: generate
	@if [ -n "$$(git status --porcelain -- gen)" ]; then \
	  echo "gen/ is stale: run make generate and commit"; git status --porcelain -- gen; exit 1; fi

.PHONY: bench
bench: deps ## Run the benchmarks and write BENCHMARKS.md.
	./scripts/bench.sh

.PHONY: fuzz
fuzz: ## Fuzz key validation and config parsing, a minute each.
	$(GO) test -run '^$$' -fuzz FuzzValidateKey -fuzztime 60s ./internal/redislock/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/config/
