SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.PHONY: help install start dev build test test-fast test-pg generate check-generated migration lint format typecheck migrate bench bench-audit-log bench-mcp scale coverage test-node-lines ci clean

# A PostgreSQL server for `make test-pg` and CI's second run (trust auth on loopback here).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

node_modules/.installed: package.json package-lock.json
	@# npm ci refuses lock files written with omit-lockfile-registry-resolved (this machine's npm config); install honours the lock.
	@# --include=dev: the build needs TypeScript even when NODE_ENV=production leaves devDependencies out.
	npm install --no-audit --no-fund --include=dev
	@touch $@

install: node_modules/.installed ## Install dependencies (when missing or out of date)

build: install ## Compile TypeScript to dist/
	npx tsc -p tsconfig.build.json

start: build ## Run the server (embedded PostgreSQL in ./data unless DATABASE_URL is set)
	node dist/src/main.js

dev: install ## Run the server and restart on changes
	npx tsx watch src/main.ts

test: install ## Every test on the embedded database, then the database-sensitive ones on PostgreSQL when it answers; ends with "N passed, N failed"
	node scripts/run-tests.js

test-fast: install ## The inner loop: unit, contract and integration tests on the embedded database (ARGS=paths to narrow it)
	node scripts/run-tests.js $(or $(ARGS),test/unit test/contract test/integration) --testPathIgnorePatterns test/contract/validators

test-pg: install ## Every test against the PostgreSQL server at TEST_DATABASE_URL
	TEST_DATABASE_URL=$(TEST_DATABASE_URL) node scripts/run-tests.js

generate: install ## Regenerate generated/ from spec/ and the migrations
	npx tsx scripts/generate.ts
	NODE_OPTIONS=--no-warnings npx tsx scripts/db-types.ts

check-generated: install ## Fail when generated/ is stale
	npx tsx scripts/generate.ts --check
	NODE_OPTIONS=--no-warnings npx tsx scripts/db-types.ts --check

migration: install ## A new migration named by the current UTC time: make migration name=add_widgets
	npx tsx scripts/new-migration.ts "$(name)"

lint: install ## The spec (Redocly), the code (ESLint: TypeScript, the layers of src/) and its format (Prettier); zero findings
	@# Every check runs, so one run shows every finding; the target fails when any did.
	@status=0; \
	echo '== spec (Redocly)'; npx tsx scripts/lint-spec.ts || status=1; \
	echo '== layering rules still fire'; node scripts/lint-boundaries-proof.mjs || status=1; \
	echo '== ESLint'; npx eslint --max-warnings 0 . || status=1; \
	echo '== Prettier'; npx prettier --check --log-level warn . || status=1; \
	exit $$status

format: install ## Format the code (Prettier), then apply ESLint's fixes
	npx prettier --write --log-level warn .
	npx eslint --fix .

typecheck: install ## Type-check everything (strict)
	npx tsc --noEmit -p tsconfig.json

migrate: install ## Apply pending migrations to the configured database
	npx tsx scripts/migrate.ts

coverage: install ## Implemented / total operations per tag (--missing lists the rest)
	npx tsx scripts/coverage.ts

bench: install ## Benchmark against bare Express (needs PostgreSQL at BENCH_DATABASE_URL)
	npx tsx scripts/bench/run.ts

bench-audit-log: install ## The audit-log list at 1,000 and 1,000,000 entries (needs PostgreSQL at BENCH_DATABASE_URL)
	npx tsx scripts/bench/audit-log.ts

bench-mcp: install ## The MCP endpoint against calling the upstream directly, each role its own process (needs PostgreSQL at BENCH_DATABASE_URL)
	npx tsx scripts/bench/mcp-endpoint.ts

scale: install ## Three replicas behind HAProxy, PgBouncer, PostgreSQL and Redis on loopback, and every fault of scripts/scale/faults (NAMES=sigkill… to narrow, ARGS=--soak=30 to soak); fails when one did not hold
	npx tsx scripts/scale/run.ts $(NAMES) $(ARGS)

test-node-lines: install ## Start-up and a representative part of the suite on Node.js 22 and 24 (npm's official binaries, scripts/node-lines)
	scripts/node-lines.sh

ci: install check-generated lint typecheck test-node-lines test ## What .ci/run runs (the whole suite last: its count is the last line)

clean: ## Remove build output and test leftovers (not ./data)
	rm -rf dist .test-results
