#!/usr/bin/env bash
# The test command that README.md documents and .ci/run calls.
#
# 1. installs what the tests need when it is missing (PostgreSQL 15
#    binaries, OpenSSL headers) - as root via apt, as on CI machines;
# 2. builds, and meanwhile (when a Docker engine answers) prepares the
#    server images of every major production runs (13, 15, 17, 18): located,
#    pulled or built (ci/build-postgres-image.sh), timed as a stage of its own;
# 3. unit tests;
# 4. the integration suite (tests/suite) in full once, on the default
#    backend (docker when an engine answers, else local binaries); a failing
#    docker run fails the whole run - no silent fallback;
#    its report:: tests write their Markdown reports for stage 4b;
# 4b. the lock timelines of those reports rendered with Mermaid in
#    headless Chromium (ci/test-render.sh; installs Chromium when missing),
#    and the pull / merge request comment against a local fake of its API
#    (ci/test-comment.py);
# 5. the sandbox contract (ROLLSAFE_SUITE=contract: start, connect,
#    databases, majors, leftovers, TLS) on every other backend present: the
#    rest of the suite talks to a database through the same handle whichever
#    backend made it, so running it twice proves nothing new;
# 6. when a Docker engine answers: `rollsafe verify` (the embedded
#    migrations) on each PostgreSQL major production runs, two at a time;
# 7. the install checks (ci/test-install.sh: crate package, image, CI
#    templates, pre-commit hook) when that script exists, beside the suite
#    once the majors' images are ready, waited for after stage 6;
# 8. checks that the tests left nothing behind (containers, servers, data
#    directories), then removes anything a crash may have left.
#
# Every stage prints how long it took: `[ci/test.sh] <stage> took Ns`; the
# run ends with every stage's time and its share of the whole run (where
# the time goes), and the ten slowest tests of each suite run.
# Extra arguments go to the test harness (e.g. a name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "[ci/test.sh] $*"; }

# Runs a stage (a command) and prints how long it took, also when it fails;
# returns the command's status. The command runs as a condition, so run
# commands here, not shell functions that rely on `set -e`.
STAGE_SECS=()
STAGE_NAMES=()
stage() {
  local name="$1" started=$SECONDS rc=0
  shift
  say "$name"
  "$@" || rc=$?
  say "$name took $((SECONDS - started))s"
  record_stage "$((SECONDS - started))" "$name$([ "$rc" = 0 ] || echo " (exit $rc)")"
  return "$rc"
}
record_stage() {
  STAGE_SECS+=("$1")
  STAGE_NAMES+=("$2")
}

# The closing summary, also when a stage failed: every stage's time and the
# slowest tests of each suite run (the suite prints them to its log).
SUITE_LOGS=()
summary() {
  # Each stage's share of the whole run so far; a stage that ran beside
  # another (the images, beside the build) is counted apart, so the
  # shares may add up to more than 100%.
  local total=$((SECONDS - ci_started)) i
  [ "$total" -gt 0 ] || total=1
  say "stage times (of ${total}s in all):"
  local staged=0
  for i in "${!STAGE_SECS[@]}"; do
    printf '  %6ss %4s%%  %s\n' "${STAGE_SECS[$i]}" "$((100 * STAGE_SECS[$i] / total))" "${STAGE_NAMES[$i]}"
    [[ "${STAGE_NAMES[$i]}" == *"(beside the "* ]] || staged=$((staged + STAGE_SECS[$i]))
  done
  local rest=$((total - staged))
  [ "$rest" -ge 0 ] || rest=0
  printf '  %6ss %4s%%  %s\n' "$rest" "$((100 * rest / total))" "outside the stages (installs, leftover checks)"
  local log
  for log in "${SUITE_LOGS[@]}"; do
    [ -f "$log" ] || continue
    say "slowest tests of $(head -n 1 "$log"):"
    sed -n '/^test suite: .* tests took/,/^$/p' "$log" | grep -v '^$' | sed 's/^/  /'
  done
}
ci_started=$SECONDS
# A fresh clone builds from nothing: incremental compilation's bookkeeping
# only costs there (with Cargo.toml's line tables: 208 s -> 168 s for every
# target on 2 cores). Every cargo command below shares the setting, so
# each reuses the others' artifacts.
export CARGO_INCREMENTAL=0
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
# The apps `rollsafe capture` runs in the suite (examples/recipe-box): Java
# with Debian's JDBC driver, Python with psycopg 3 from PyPI.
if ! command -v javac >/dev/null 2>&1 || [ ! -e /usr/share/java/postgresql.jar ]; then
  apt_install default-jdk-headless libpostgresql-jdbc-java
fi
if ! python3 -c 'import psycopg' >/dev/null 2>&1; then
  say "installing psycopg[binary] (pip)"
  python3 -m pip install -q 'psycopg[binary]' || { say "pip install 'psycopg[binary]' failed; install it and run again"; exit 2; }
fi
# The frameworks whose own migrate the suite runs (tests/suite/frameworks.rs,
# tests/fixtures/frameworks): Django, SQLAlchemy with Alembic (PyPI),
# ActiveRecord with rake (Debian). A timed stage: nothing when present.
install_frameworks() {
  if ! python3 -c 'import django, alembic, sqlalchemy' >/dev/null 2>&1; then
    python3 -m pip install -q 'Django>=5,<6' SQLAlchemy alembic 2>&1 | grep -v 'Running pip as' || true
    python3 -c 'import django, alembic, sqlalchemy' || { say "pip install Django SQLAlchemy alembic failed; install them and run again"; return 2; }
  fi
  if ! command -v rake >/dev/null 2>&1 || ! ruby -e 'require "active_record"; require "pg"' >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { say "missing ruby-activerecord ruby-pg rake; install them (apt-get install ruby-activerecord ruby-pg rake) and run again"; return 2; }
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ruby-activerecord ruby-pg rake >/dev/null || return 2
  fi
}
stage "frameworks' runtimes (Django, Alembic, ActiveRecord)" install_frameworks || exit 2

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
  # Where the local backend puts its servers (cleanup::local_dir_parents).
  local parent
  for parent in ${ROLLSAFE_LOCAL_DIR:-} /dev/shm "${TMPDIR:-/tmp}"; do
    for dir in "$parent"/rollsafe-local-*; do
      [ -e "$dir" ] || continue
      pid=$(pgrep -f -- "-D $dir/" | head -n 1)
      held_elsewhere "$pid" || echo "datadir $dir"
    done
    pgrep -f -- "-D $parent/rollsafe-local-" | while read -r pid; do
      held_elsewhere "$pid" || echo "server-pid $pid"
    done
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
LOGDIR=$(mktemp -d)
on_exit() {
  local rc=$?
  # A run that ends early (a failing stage) lets the install checks beside
  # it finish, so they remove their own containers and images.
  if [ -n "${install_pid:-}" ] && kill -0 "$install_pid" 2>/dev/null; then
    say "waiting for the install checks started beside the suite to finish"
    wait "$install_pid" || true
  fi
  created_by_this_run | remove_resources
  summary
  say "ci/test.sh took $((SECONDS - ci_started))s"
  rm -rf "$LOGDIR"
  exit "$rc"
}
trap on_exit EXIT

if [ -n "$before" ]; then
  if [ "${CI:-}" = true ]; then
    say "removing leftovers of an earlier run: $(echo "$before" | tr '\n' ' ')"
    echo "$before" | remove_resources
    before=$(resources | sort)
  else
    say "note: other rollsafe sandboxes exist (another run?); they are left alone"
  fi
fi

MAJORS=(13 15 17 18)
HARD_MAJOR=15  # the image the integration suite runs on
docker_answers=false
docker info >/dev/null 2>&1 && docker_answers=true

# The images are built from Debian packages (network and disk) while the
# code compiles (CPU): the suite's own image first, beside the build (on a
# fresh machine ~80-110 s each, the build ~170 s), then the other majors'
# beside the build and the suite, waited for only where the majors are
# verified. Built one after another before the build's end, four images
# (~430 s) outlasted it by minutes on a fresh machine. Each part is timed.
images_pid=""
majors_pid=""
prepare_images() { # name-of-record images...
  local record="$1" started=$SECONDS rc=0
  shift
  say "preparing images $* (beside the build)"
  bash ci/build-postgres-image.sh "$@" || rc=$?
  echo "$rc $((SECONDS - started))" >"$LOGDIR/$record.rc"
}
# Waits for a background image job and records its time as a stage.
images_ready() { # pid record what
  [ -n "$1" ] || return 0
  wait "$1" || true
  cat "$LOGDIR/$2.log"
  local rc took
  read -r rc took <"$LOGDIR/$2.rc"
  say "preparing images $3 took ${took}s (exit $rc)"
  record_stage "$took" "preparing images $3 (beside the build)"
}
if $docker_answers; then
  other_images=()
  for major in "${MAJORS[@]}"; do
    [ "postgres:$major" = "$IMAGE" ] || other_images+=("postgres:$major")
  done
  (
    # Chromium for the lock timelines' stage (ci/test-render.sh installs
    # it when missing, ~30 s on a fresh machine, after the suite): here,
    # beside the build, one apt after another in this job (mmdebstrap's
    # own install comes next, in the images' script).
    if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      started=$SECONDS
      apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core python3-venv >/dev/null &&
        say "installing chromium fonts-dejavu-core python3-venv (apt, for ci/test-render.sh) took $((SECONDS - started))s" ||
        say "installing chromium for ci/test-render.sh failed: that stage installs it again"
    fi
    prepare_images images "$IMAGE"
  ) >"$LOGDIR/images.log" 2>&1 &
  images_pid=$!
  # After the suite's image (two mmdebstraps at once halve the build's
  # share of the two cores).
  (
    wait_for() { while kill -0 "$1" 2>/dev/null; do sleep 1; done; }
    wait_for "$images_pid"
    prepare_images majors "${other_images[@]}"
  ) >"$LOGDIR/majors.log" 2>&1 &
  majors_pid=$!
fi

stage "building (locked dependencies)" cargo build --locked --all-targets

if [ -n "$images_pid" ]; then
  images_ready "$images_pid" images "$IMAGE"
  # Only the suite's own image is required here; another major's failure
  # is reported per major below.
  docker image inspect "$IMAGE" >/dev/null 2>&1 || {
    say "image $IMAGE could not be prepared: see above"
    exit 1
  }
fi

stage "unit tests" cargo test --locked --lib --bins

backends=()
if $docker_answers; then
  backends+=(docker)
else
  say "no Docker engine answers: the docker backend is not tested on this machine"
fi
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  backends+=(local)
fi
[ "${#backends[@]}" -gt 0 ] || { say "neither Docker nor PostgreSQL binaries: nothing to test on"; exit 1; }

# The suite, with its output kept for the closing summary.
suite() {
  local backend="$1" scope="$2" log="$LOGDIR/suite-$1.log"
  shift 2
  echo "the $scope suite on the $backend backend" >"$log"
  SUITE_LOGS+=("$log")
  ROLLSAFE_POSTGRES="$backend" ROLLSAFE_SUITE="$scope" \
    cargo test --locked --test suite -- "$@" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}

# The install checks (an image built from Debian packages, containers,
# pip: mostly waiting on the network and the disk, ~36 s of CPU in 120 s)
# run beside the suite, from the moment the majors' images they package
# are ready: after the suite and the majors' verify they were 120-166 s
# of a fresh run's tail. Waited for (and timed) after the majors' verify.
install_pid=""
if [ -f ci/test-install.sh ]; then
  (
    while [ -n "$majors_pid" ] && kill -0 "$majors_pid" 2>/dev/null; do sleep 1; done
    started=$SECONDS rc=0
    bash ci/test-install.sh || rc=$?
    echo "$rc $((SECONDS - started))" >"$LOGDIR/install.rc"
  ) >"$LOGDIR/install.log" 2>&1 &
  install_pid=$!
  say "install checks (ci/test-install.sh) started beside the suite (once the majors' images are ready)"
fi

default_backend="${backends[0]}"
export ROLLSAFE_RENDER_DIR="$LOGDIR/render"
mkdir -p "$ROLLSAFE_RENDER_DIR"
stage "integration suite (all tests) on the ${default_backend} backend" \
  suite "$default_backend" all "$@"
unset ROLLSAFE_RENDER_DIR
stage "lock timelines rendered in Chromium (ci/test-render.sh)" \
  bash ci/test-render.sh "$LOGDIR/render"
stage "review comment against a fake API (ci/test-comment.py)" python3 ci/test-comment.py
for backend in "${backends[@]:1}"; do
  stage "integration suite (sandbox contract) on the ${backend} backend" \
    suite "$backend" contract "$@"
done

# The rehearsal on every major production runs: the shipped migrations
# must verify with zero errors on each, two majors at a time (2 cores).
majors_summary=()
verify_major() {
  local major="$1" image="postgres:$1" started=$SECONDS code=0
  # The binary the build stage made: `cargo run` would build another one
  # (without the dev-dependencies' features it resolves some crates
  # differently), ~70 s of compiling inside this stage on a fresh clone.
  "${CARGO_TARGET_DIR:-target}/debug/rollsafe" verify --postgres docker --image "$image" \
    >"$LOGDIR/verify-$major.log" 2>&1 || code=$?
  echo "$code $((SECONDS - started))" >"$LOGDIR/verify-$major.rc"
}
verify_majors() {
  local major pids=() ready=() code took failed=0
  for major in "${MAJORS[@]}"; do
    if ! docker image inspect "postgres:$major" >/dev/null 2>&1; then
      say "verify on PG$major: not run, image postgres:$major could not be prepared (see above)"
      majors_summary+=("PG$major:no-image")
      [ "$major" != "$HARD_MAJOR" ] || failed=1
      continue
    fi
    ready+=("$major")
  done
  local i
  for ((i = 0; i < ${#ready[@]}; i += 2)); do
    pids=()
    for major in "${ready[@]:i:2}"; do
      verify_major "$major" &
      pids+=($!)
    done
    wait "${pids[@]}" || true
  done
  for major in "${ready[@]}"; do
    read -r code took <"$LOGDIR/verify-$major.rc"
    say "verify on PG$major: exit $code in ${took}s"
    if [ "$code" != 0 ]; then
      cat "$LOGDIR/verify-$major.log"
      failed=1
    else
      grep -E '^(PASSED|FAILED)' "$LOGDIR/verify-$major.log" | sed "s/^/  PG$major: /"
    fi
    majors_summary+=("PG$major:exit-$code")
  done
  return "$failed"
}
if $docker_answers; then
  images_ready "$majors_pid" majors "${other_images[*]}"
fi
majors_rc=0
if $docker_answers; then
  stage "verify on PG${MAJORS[*]} (two at a time)" verify_majors || majors_rc=$?
else
  say "no Docker engine answers: verify on the production majors (${MAJORS[*]}) is not run on this machine"
fi
if [ -n "$install_pid" ]; then
  wait "$install_pid" || true
  cat "$LOGDIR/install.log"
  read -r install_rc install_took <"$LOGDIR/install.rc"
  say "install checks (ci/test-install.sh) took ${install_took}s (exit $install_rc)"
  record_stage "$install_took" "install checks (ci/test-install.sh, beside the suite)$([ "$install_rc" = 0 ] || echo " (exit $install_rc)")"
  [ "$install_rc" = 0 ] || { say "the install checks failed (above): that fails the run"; exit 1; }
fi
[ "$majors_rc" = 0 ] || {
  say "verify failed on a production major: that fails the run"
  exit 1
}

left=$(created_by_this_run)
if [ -z "$left" ]; then
  say "no leftovers: the tests removed every container, server and data directory they created"
else
  say "the tests left resources behind: $(echo "$left" | tr '\n' ' ')"
  exit 1
fi
say "all passed: full suite on ${default_backend}${backends[1]:+, sandbox contract on ${backends[*]:1}}${majors_summary:+; verify per major: ${majors_summary[*]}}"
