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
#
# CPU_AT=S (with CPU_FOR=D, default 10) measures, from S seconds into the load
# for D seconds, how busy the machine's cores were (/proc/stat) and the CPU
# that Postgres (every process of the server), the service's processes and the
# load generator used (/proc/PID/stat, user and system), as cores and, with
# -rate, as milliseconds per call. It reads with shell builtins only: a
# sampler that forks or reads every thread's files slows the run it measures.
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
# ticks PIDS...: the user and system clock ticks of the processes, summed.
. "$(dirname "$0")/cputicks.sh"
ticks() {
  local sum=0 p n
  while read -r p n; do sum=$((sum + n)); done < <(cputicks "$@")
  echo "$sum"
}
# cores: the busy and the total ticks of the machine's cores.
cores() {
  local cpu user nice sys idle iowait irq softirq rest
  read -r cpu user nice sys idle iowait irq softirq rest </proc/stat
  echo "$((user + nice + sys + irq + softirq)) $((user + nice + sys + idle + iowait + irq + softirq))"
}
svc=("${pids[@]}")
"$bin" load -url http://127.0.0.1:18080 -account 1 -op diff -c "$c" -t "$t" "$@" & loader=$!
pids+=("$loader")
if [ -n "${CPU_AT:-}" ]; then
  secs=${CPU_FOR:-10} rate=""
  for ((i = 1; i < $#; i++)); do
    if [ "${!i}" = "-rate" ]; then j=$((i + 1)); rate=${!j}; fi
  done
  sleep "$CPU_AT"
  pg=($(pgrep -x postgres))
  p0=$(ticks "${pg[@]}") s0=$(ticks "${svc[@]}") l0=$(ticks "$loader") m0=($(cores))
  sleep "$secs"
  p1=$(ticks "${pg[@]}") s1=$(ticks "${svc[@]}") l1=$(ticks "$loader") m1=($(cores))
fi
wait "$loader"
if [ -n "${CPU_AT:-}" ]; then
  awk -v hz="$(getconf CLK_TCK)" -v secs="$secs" -v rate="$rate" -v busy=$((m1[0] - m0[0])) -v all=$((m1[1] - m0[1])) \
    -v pg=$((p1 - p0)) -v svc=$((s1 - s0)) -v ld=$((l1 - l0)) 'BEGIN {
      printf "cpu over %ss: cores %.0f%% busy; cores used: postgres %.2f, x402d %.2f, load %.2f\n", secs, 100 * busy / all, pg / hz / secs, svc / hz / secs, ld / hz / secs
      if (rate > 0) printf "cpu per call at %s/s: postgres %.2f ms, x402d %.2f ms, load %.2f ms\n", rate, 1000 * pg / hz / secs / rate, 1000 * svc / hz / secs / rate, 1000 * ld / hz / secs / rate
    }'
fi
echo "failed settlement attempts: $(cat "$log"-*.log | grep -c 'settlement attempt failed' || true)"
