#!/usr/bin/env bash
# `make test-node-lines` (part of .ci/run): the supported lines besides the machines' own Node.js
# 20 (src/lib/node-lines.ts): for Node.js 22 and 24, the official binaries as published on npm
# (pinned in scripts/node-lines/package-lock.json, installed here, outside the app's
# node_modules), then on each line
#   1. start-up: the built server (dist/, `make build`) on a scratch data directory migrates the
#      embedded database and answers /health; the same on a scratch PostgreSQL database when the
#      server at PG_URL answers;
#   2. a representative part of the suite on the embedded database (migrations, the contract, the
#      MCP endpoint in both revision families, sign-in, the OAuth server), and its database part
#      again on PostgreSQL.
# Bounded: each server start has 60 s, each line's tests about two minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."

LINES_DIR=scripts/node-lines
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}
STAMP=$LINES_DIR/node_modules/.installed
if [ ! -f "$STAMP" ] || [ "$LINES_DIR/package-lock.json" -nt "$STAMP" ]; then
  npm ci --ignore-scripts --no-audit --no-fund --prefix "$LINES_DIR" >/dev/null
  touch "$STAMP"
fi
[ -f dist/src/main.js ] && [ -z "$(find src -newer dist/src/main.js -name '*.ts' -print -quit)" ] || npx tsc -p tsconfig.build.json

SUBSET_EMBEDDED=(test/unit/node-lines.test.ts test/db test/contract/operations.test.ts test/integration/mcp-endpoint.test.ts test/integration/mcp-endpoint-2026.test.ts test/integration/sessions.test.ts test/integration/magic-link.test.ts test/integration/mcp-oauth.test.ts)
SUBSET_PG=(test/db test/integration/mcp-endpoint.test.ts test/integration/sessions.test.ts test/integration/mcp-oauth.test.ts)
pg_answers() { command -v psql >/dev/null && pg_isready -q -d "$PG_URL" 2>/dev/null; }

# Starts the built server with this Node.js, waits for /health, stops it. $2: DATABASE_URL or empty.
start_once() {
  local node=$1 database=$2 data port pid ok=1
  data=$(mktemp -d)
  port=$("$node" -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  # With DATABASE_URL the key cannot be made in DATA_DIR: every replica must share one.
  DATA_DIR=$data PORT=$port BASE_URL=http://127.0.0.1:$port DATABASE_URL=$database LOG_LEVEL=warn \
    ENCRYPTION_KEY=$("$node" -e 'console.log(require("crypto").randomBytes(32).toString("hex"))') \
    "$node" dist/src/main.js >"$data/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    if "$node" -e "fetch('http://127.0.0.1:$port/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"; then ok=0; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ $ok -ne 0 ]; then echo "The server did not start on Node.js $("$node" -v)${database:+ with PostgreSQL}:"; cat "$data/server.log"; fi
  rm -rf "$data"
  return $ok
}

failed=0
for line in ${NODE_LINES:-22 24}; do
  node="$LINES_DIR/node_modules/node$line/bin/node"
  echo "== Node.js $("$node" -v)"
  start_once "$node" "" && echo "start-up on the embedded database: /health answered" || failed=1
  if pg_answers; then
    scratch="cp_lines_${line}_$$"
    psql -q "$PG_URL" -c "create database $scratch" >/dev/null
    start_once "$node" "${PG_URL%/*}/$scratch" && echo "start-up on PostgreSQL: /health answered" || failed=1
    psql -q "$PG_URL" -c "drop database if exists $scratch with (force)" >/dev/null
  fi
  "$node" scripts/run-tests.js "${SUBSET_EMBEDDED[@]}" || failed=1
  if pg_answers; then TEST_DATABASE_URL=$PG_URL "$node" scripts/run-tests.js "${SUBSET_PG[@]}" || failed=1; fi
done
exit $failed
