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
# 4. when a Docker engine answers: `rollsafe verify` (the embedded
#    migrations) on each PostgreSQL major production runs (13, 15, 17, 18),
#    their images located, pulled or built (ci/build-postgres-image.sh);
# 5. checks that the tests left nothing behind (containers, servers, data
#    directories), then removes anything a crash may have left.
#
# Every stage prints how long it took: `[ci/test.sh] <stage> took Ns`.
# Extra arguments go to the test harness (e.g. a name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "[ci/test.sh] $*"; }

# Runs a stage (a command) and prints how long it took, also when it fails;
# returns the command's status. The command runs as a condition, so run
# commands here, not shell functions that rely on `set -e`.
stage() {
  local name="$1" started=$SECONDS rc=0
  shift
  say "$name"
  "$@" || rc=$?
  say "$name took $((SECONDS - started))s"
  return "$rc"
}
ci_started=$SECONDS
IMAGE="${ROLLSAFE_POSTGRES_IMAGE:-postgres:15}"
export ROLLSAFE_POSTGRES_IMAGE="$IMAGE"

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    say "missing $*; install it (apt-get install $*) and run again"
    exit 2
  fi
  local started=$SECONDS
  say "installing $* (apt)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  say "installing $* took $((SECONDS - started))s"
}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  apt_install postgresql-15
fi
if ! pkg-config --exists openssl 2>/dev/null; then
  apt_install libssl-dev pkg-config
fi

# What exists of rollsafe's throwaway resources right now, one per line:
# sandbox containers (by label), local data directories, local servers.
# Resources that a live process of another run holds (a developer's suite
# running next to this one on a shared machine) are not listed: the
# container label and the server's parent chain say whose they are.
resources() {
  local id pid dir
  if docker info >/dev/null 2>&1; then
    docker ps -a --filter label=rollsafe.sandbox --format '{{.ID}} {{.Label "rollsafe.sandbox"}}' |
      while read -r id pid; do
        held_elsewhere "$pid" || echo "container $id"
      done
  fi
  for dir in "${TMPDIR:-/tmp}"/rollsafe-local-*; do
    [ -e "$dir" ] || continue
    pid=$(pgrep -f -- "-D $dir/" | head -n 1)
    held_elsewhere "$pid" || echo "datadir $dir"
  done
  pgrep -f -- "-D ${TMPDIR:-/tmp}/rollsafe-local-" | while read -r pid; do
    held_elsewhere "$pid" || echo "server-pid $pid"
  done
  true
}

# Whether process $1 (the process that started a sandbox, or a local
# server) is alive and not started by this script.
held_elsewhere() {
  local pid="${1:-}"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    [ "$pid" = "$$" ] && return 1
    pid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')
  done
  return 0
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

stage "building (locked dependencies)" cargo build --locked --all-targets

stage "unit tests" cargo test --locked --lib --bins

backends=()
docker_answers=false
if docker info >/dev/null 2>&1; then
  docker_answers=true
  stage "preparing image $IMAGE" bash ci/build-postgres-image.sh "$IMAGE"
  backends+=(docker)
else
  say "no Docker engine answers: the docker backend is not tested on this machine"
fi
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  backends+=(local)
fi

for backend in "${backends[@]}"; do
  ROLLSAFE_POSTGRES="$backend" stage "integration suite on the ${backend} backend" \
    cargo test --locked --test suite -- "$@"
done

# The rehearsal on every major production runs: the shipped migrations
# must verify with zero errors on each. An image that cannot be built here
# (a mirror out of reach) is reported, except 15's, which the suite needs.
MAJORS=(13 15 17 18)
HARD_MAJOR=15  # the image the integration suite runs on
majors_summary=()
if $docker_answers; then
  other_images=()
  for major in "${MAJORS[@]}"; do
    [ "postgres:$major" = "$IMAGE" ] || other_images+=("postgres:$major")
  done
  # A failed build is reported per major below (its verify does not run).
  stage "preparing images ${other_images[*]}" bash ci/build-postgres-image.sh "${other_images[@]}" || true
  for major in "${MAJORS[@]}"; do
    image="postgres:$major"
    if ! docker image inspect "$image" >/dev/null 2>&1; then
      say "verify on PG$major: not run, image $image could not be prepared (see above)"
      majors_summary+=("PG$major:no-image")
      [ "$major" != "$HARD_MAJOR" ] || exit 1
      continue
    fi
    code=0
    stage "verify on PG$major" \
      cargo run --locked --quiet -- verify --postgres docker --image "$image" || code=$?
    say "verify on PG$major: exit $code"
    majors_summary+=("PG$major:exit-$code")
    if [ "$code" != 0 ]; then
      say "verify on PG$major failed: that fails the run"
      exit 1
    fi
  done
else
  say "no Docker engine answers: verify on the production majors (${MAJORS[*]}) is not run on this machine"
fi

left=$(created_by_this_run)
if [ -z "$left" ]; then
  say "no leftovers: the tests removed every container, server and data directory they created"
else
  say "the tests left resources behind: $(echo "$left" | tr '\n' ' ')"
  exit 1
fi
say "all passed on: ${backends[*]}${majors_summary:+; verify per major: ${majors_summary[*]}}"
say "ci/test.sh took $((SECONDS - ci_started))s"
