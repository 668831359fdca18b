#!/usr/bin/env bash
# Install and start a Docker engine so the Docker sandbox tests run for real. Pulling from a
# registry is never needed: the sandbox image is built offline by flowzoo itself.
# Where this cannot work (no root, no apt), the Docker tests skip with the reason.
set -uo pipefail
if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null \
        || echo "start-docker: could not install docker.io" >&2
    fi
  fi
  if command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    nohup dockerd >/tmp/flowzoo-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  fi
fi
if docker info >/dev/null 2>&1; then echo "start-docker: engine up"; else echo "start-docker: no engine (Docker tests will skip)"; fi
exit 0
