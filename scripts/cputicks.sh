#!/usr/bin/env bash
# Prints, for each PID given, "PID TICKS": the user and system clock ticks
# (getconf CLK_TCK a second) the process has used, from /proc/PID/stat. A PID
# gone is left out. It reads with shell builtins only: run from a sampler
# (scripts/load-paid.sh sources it; the load:cpu scenario runs it), it does
# not slow the run it measures.
#
#   scripts/cputicks.sh PID...
cputicks() {
  local p line f
  for p in "$@"; do
    read -r line <"/proc/$p/stat" 2>/dev/null || continue
    f=(${line##*) })
    echo "$p $((f[11] + f[12]))"
  done
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cputicks "$@"
fi
