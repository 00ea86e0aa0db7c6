#!/usr/bin/env bash
# Measures paid calls settled on the devchain (docs/performance.md): starts the
# service on a fresh database, runs `x402d load` against it, then stops the
# service and drops the database.
#
#   scripts/load-paid.sh [CONCURRENCY] [DURATION] [extra x402d load flags...]
#
# LAYOUT=serve (the default) runs `x402d serve`; LAYOUT=split runs the layout of
# compose.yaml: `x402d devchain`, `migrate`, one `api` and two `worker`
# processes. PG_HOST and PG_PORT name the Postgres server (127.0.0.1:5432);
# bin/x402d must be built (go tool task build). Service settings
# (WORKERS_SETTLEMENT, DB_MAX_CONNS, ...) are taken from the environment. Logs
# go to /tmp/x402d-load-*.log.
set -euo pipefail

c=${1:-150}
t=${2:-20s}
shift $(( $# < 2 ? $# : 2 ))
layout=${LAYOUT:-serve}
host=${PG_HOST:-127.0.0.1}
port=${PG_PORT:-5432}
db="x402_perf_$$"
bin="$(dirname "$0")/../bin/x402d"
log=/tmp/x402d-load
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  psql -q -h "$host" -p "$port" -U postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
}
trap cleanup EXIT

export DATABASE_URL="postgres://postgres@$host:$port/$db?sslmode=disable"
export SETTLEMENT=devchain DEVCHAIN_RPC_ADDR=127.0.0.1:18545 LOG_LEVEL="${LOG_LEVEL:-warn}"
case "$layout" in
serve)
  LISTEN_ADDR=127.0.0.1:18080 "$bin" serve 2>"$log-serve.log" & pids+=($!)
  ;;
split)
  psql -q -h "$host" -p "$port" -U postgres -c "CREATE DATABASE $db" >/dev/null
  "$bin" devchain 2>"$log-devchain.log" & pids+=($!)
  "$bin" migrate 2>"$log-migrate.log"
  for _ in $(seq 1 60); do
    curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' \
      -d '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' http://127.0.0.1:18545 2>/dev/null && break
    sleep 0.5
  done
  LISTEN_ADDR=127.0.0.1:18080 "$bin" api 2>"$log-api.log" & pids+=($!)
  METRICS_ADDR=127.0.0.1:19101 "$bin" worker 2>"$log-worker1.log" & pids+=($!)
  METRICS_ADDR=127.0.0.1:19102 "$bin" worker 2>"$log-worker2.log" & pids+=($!)
  ;;
*)
  echo "LAYOUT must be serve or split, not $layout" >&2
  exit 2
  ;;
esac

for _ in $(seq 1 120); do
  if curl -fsS -o /dev/null http://127.0.0.1:18080/readyz 2>/dev/null; then
    break
  fi
  for p in "${pids[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      echo "a service process exited; its logs are $log-*.log" >&2
      exit 1
    fi
  done
  sleep 0.5
done
"$bin" load -url http://127.0.0.1:18080 -account 1 -op diff -c "$c" -t "$t" "$@"
echo "failed settlement attempts: $(cat "$log"-*.log | grep -c 'settlement attempt failed' || true)"
