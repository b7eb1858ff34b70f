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

# What exists of rollsafe's throwaway resources right now, one per line:
# sandbox containers (by label), local data directories, local servers.
resources() {
  if docker info >/dev/null 2>&1; then
    docker ps -aq --filter label=rollsafe.sandbox | sed 's/^/container /'
  fi
  ls -d "${TMPDIR:-/tmp}"/rollsafe-local-* 2>/dev/null | sed 's/^/datadir /'
  pgrep -f -- "-D ${TMPDIR:-/tmp}/rollsafe-local-" | sed 's/^/server-pid /'
  true
}

# Removes the resources listed on stdin.
remove_resources() {
  while read -r kind id; do
    case "$kind" in
      container) docker rm -f "$id" >/dev/null 2>&1 || true ;;
      server-pid) kill -QUIT "$id" 2>/dev/null || true ;;
      datadir) sleep 0.2; rm -rf "$id" ;;
    esac
  done
}

# Resources that exist now but did not before this run started. Only those
# are this run's: another run on the same machine (a developer's) is left
# alone.
before=$(resources | sort)
created_by_this_run() { comm -13 <(echo "$before") <(resources | sort); }
trap 'created_by_this_run | remove_resources' EXIT

if [ -n "$before" ]; then
  if [ "${CI:-}" = true ]; then
    say "removing leftovers of an earlier run: $(echo "$before" | tr '\n' ' ')"
    echo "$before" | remove_resources
    before=$(resources | sort)
  else
    say "note: other rollsafe sandboxes exist (another run?); they are left alone"
  fi
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

left=$(created_by_this_run)
if [ -z "$left" ]; then
  say "no leftovers: the tests removed every container, server and data directory they created"
else
  say "the tests left resources behind: $(echo "$left" | tr '\n' ' ')"
  exit 1
fi
say "all passed on: ${backends[*]}"
