#!/usr/bin/env bash
# Measures paid calls settled on the devchain (docs/performance.md): runs
# `x402d serve` on a fresh database, then `x402d load` against it, then stops
# the service and drops the database.
#
#   scripts/load-paid.sh [CONCURRENCY] [DURATION] [extra x402d load flags...]
#
# PG_HOST and PG_PORT name the Postgres server (127.0.0.1:5432); bin/x402d must
# be built (go tool task build). Service settings (WORKERS_SETTLEMENT,
# DB_MAX_CONNS, ...) are taken from the environment.
set -euo pipefail

c=${1:-150}
t=${2:-20s}
shift $(( $# < 2 ? $# : 2 ))
host=${PG_HOST:-127.0.0.1}
port=${PG_PORT:-5432}
db="x402_perf_$$"
bin="$(dirname "$0")/../bin/x402d"

DATABASE_URL="postgres://postgres@$host:$port/$db?sslmode=disable" \
  LISTEN_ADDR=127.0.0.1:18080 DEVCHAIN_RPC_ADDR=127.0.0.1:18545 LOG_LEVEL="${LOG_LEVEL:-warn}" \
  "$bin" serve 2>/tmp/x402d-load-paid.log &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  psql -q -h "$host" -p "$port" -U postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
}
trap cleanup EXIT

for _ in $(seq 1 120); do
  if curl -fsS -o /dev/null http://127.0.0.1:18080/readyz 2>/dev/null; then
    break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "x402d serve exited; its log is /tmp/x402d-load-paid.log" >&2
    exit 1
  fi
  sleep 0.5
done
"$bin" load -url http://127.0.0.1:18080 -account 1 -op diff -c "$c" -t "$t" "$@"
