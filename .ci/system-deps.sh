#!/usr/bin/env bash
# System packages the sandbox needs: bubblewrap (process isolation). Idempotent; needs root.
set -euo pipefail
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "system-deps: missing ${need[*]} and cannot apt-get install them; sandbox isolation will be reduced" >&2
  fi
fi
