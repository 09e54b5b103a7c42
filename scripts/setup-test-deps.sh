#!/usr/bin/env bash
# What the test suite needs beyond the Rust toolchain, set up on a fresh machine (called by
# scripts/test): the PostgreSQL server binaries, a running Docker engine and Chromium (the
# status-page test). Missing Debian packages are installed when this runs as root with apt,
# saying what it installs; otherwise it stops at once with the one command that would.
# Nothing here is needed to build or run ferroclaw itself.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test: installing ${missing[*]} (apt-get)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "scripts/test: missing ${missing[*]}; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# A Docker engine that is installed but not running is started; the sandbox tests fail
# loudly (never skip) when none can be had.
if ! docker info >/dev/null 2>&1; then
  echo "scripts/test: starting the Docker engine" >&2
  if [ -x /etc/init.d/docker ]; then
    /etc/init.d/docker start >/dev/null 2>&1 || true
  fi
  if ! docker info >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1; then
    (dockerd >/tmp/ferroclaw-dockerd.log 2>&1 &)
  fi
  for _ in $(seq 1 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    echo "scripts/test: no Docker engine could be started (see /tmp/ferroclaw-dockerd.log)" >&2
    exit 1
  fi
fi
