#!/usr/bin/env bash
# The test command that README.md documents and .ci/run calls.
#
# 1. installs what the tests need when it is missing (PostgreSQL 15
#    binaries, OpenSSL headers) - as root via apt, as on CI machines;
# 2. unit tests;
# 3. the integration suite (tests/suite) once per backend present:
#    - docker, when a Docker engine answers: the image is located, pulled or
#      built (ci/build-postgres-image.sh); a failing docker run fails the
#      whole run - no silent fallback to local binaries;
#    - local, when PostgreSQL binaries are installed;
# 4. checks that the tests left nothing behind (containers, servers, data
#    directories), then removes anything a crash may have left.
#
# Extra arguments go to the test harness (e.g. a name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "[ci/test.sh] $*"; }
IMAGE="${ROLLSAFE_POSTGRES_IMAGE:-postgres:15}"
export ROLLSAFE_POSTGRES_IMAGE="$IMAGE"

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    say "missing $*; install it (apt-get install $*) and run again"
    exit 2
  fi
  say "installing $* (apt)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  apt_install postgresql-15
fi
if ! pkg-config --exists openssl 2>/dev/null; then
  apt_install libssl-dev pkg-config
fi

leftovers() {
  local found=0
  if docker info >/dev/null 2>&1; then
    local c
    c=$(docker ps -aq --filter label=rollsafe.sandbox)
    if [ -n "$c" ]; then say "leftover containers: $c"; found=1; fi
  fi
  if ls -d "${TMPDIR:-/tmp}"/rollsafe-local-* >/dev/null 2>&1; then
    say "leftover data directories: $(ls -d "${TMPDIR:-/tmp}"/rollsafe-local-* | tr '\n' ' ')"; found=1
  fi
  if pgrep -f -- "-D ${TMPDIR:-/tmp}/rollsafe-local-" >/dev/null; then
    say "leftover postgres processes: $(pgrep -f -- "-D ${TMPDIR:-/tmp}/rollsafe-local-" | tr '\n' ' ')"; found=1
  fi
  return $found
}

cleanup() {
  if docker info >/dev/null 2>&1; then
    docker ps -aq --filter label=rollsafe.sandbox | xargs -r docker rm -f >/dev/null || true
  fi
  pkill -QUIT -f -- "-D ${TMPDIR:-/tmp}/rollsafe-local-" || true
  sleep 0.5
  rm -rf "${TMPDIR:-/tmp}"/rollsafe-local-*
}
trap cleanup EXIT

if ! leftovers; then
  say "removing leftovers of an earlier run before starting"
  cleanup
fi

say "building (locked dependencies)"
cargo build --locked --all-targets

say "unit tests"
cargo test --locked --lib --bins

backends=()
if docker info >/dev/null 2>&1; then
  bash ci/build-postgres-image.sh "$IMAGE"
  backends+=(docker)
else
  say "no Docker engine answers: the docker backend is not tested on this machine"
fi
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  backends+=(local)
fi

for backend in "${backends[@]}"; do
  say "integration suite on the ${backend} backend"
  ROLLSAFE_POSTGRES="$backend" cargo test --locked --test suite -- "$@"
done

if leftovers; then
  say "no leftovers: no rollsafe containers, servers or data directories remain"
else
  say "the tests left resources behind (listed above)"
  exit 1
fi
say "all passed on: ${backends[*]}"
