SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.PHONY: help install start dev build test test-pg generate check-generated lint typecheck migrate bench coverage ci clean

# A PostgreSQL server for `make test-pg` and CI's second run (trust auth on loopback here).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

node_modules/.installed: package.json package-lock.json
	@# npm ci refuses lock files written with omit-lockfile-registry-resolved (this machine's npm config); install honours the lock.
	npm install --no-audit --no-fund
	@touch $@

install: node_modules/.installed ## Install dependencies (when missing or out of date)

build: install ## Compile TypeScript to dist/
	npx tsc -p tsconfig.build.json

start: build ## Run the server (embedded PostgreSQL in ./data unless DATABASE_URL is set)
	node dist/src/main.js

dev: install ## Run the server and restart on changes
	npx tsx watch src/main.ts

test: install ## Run every test (embedded PostgreSQL; TEST_DATABASE_URL for a server); ends with "N passed, N failed"
	node scripts/run-tests.js

test-pg: install ## Run every test against the PostgreSQL server at TEST_DATABASE_URL
	TEST_DATABASE_URL=$(TEST_DATABASE_URL) node scripts/run-tests.js

generate: install ## Regenerate generated/ from spec/
	npx tsx scripts/generate.ts

check-generated: install ## Fail when generated/ is stale
	npx tsx scripts/generate.ts --check

lint: install ## Lint the spec with Redocly (zero errors, zero warnings)
	npx redocly lint spec/openapi.yml --config redocly.yaml --format stylish 2>&1 | grep -v 'Node.js 20\|nodejs.org\|Update Node\|Future Redocly\|You are using\|reached end-of-life\|^ *║ *║$$\|╔\|╚' ; exit $${PIPESTATUS[0]}

typecheck: install ## Type-check everything (strict)
	npx tsc --noEmit -p tsconfig.json

migrate: install ## Apply pending migrations to the configured database
	npx tsx scripts/migrate.ts

coverage: install ## Implemented / total operations per tag (--missing lists the rest)
	npx tsx scripts/coverage.ts

bench: install ## Benchmark against bare Express (needs PostgreSQL at BENCH_DATABASE_URL)
	npx tsx scripts/bench/run.ts

ci: install check-generated lint typecheck test ## What .ci/run runs (then test-pg when PostgreSQL answers)

clean: ## Remove build output and test leftovers (not ./data)
	rm -rf dist .test-results
