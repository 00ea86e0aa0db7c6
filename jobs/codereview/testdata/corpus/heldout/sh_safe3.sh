#!/bin/bash
set -euo pipefail
main() {
  local target="${1:?usage: $0 target}"
  printf '%s\n' "$target"
  for arg in "$@"; do
    rm -f -- "$arg.tmp"
  done
}
main "$@"
