#!/usr/bin/env bash
# The test stage for every way of installing rollsafe (issue 21), run by
# ci/test.sh as its own stage and runnable alone: `bash ci/test-install.sh`.
#
#   1. the crate: `cargo package --list` ships the sources, the migrations
#      build.rs embeds, every file an include_str!/include_bytes! names,
#      and none of ci/, .ci/, tests/, benches/, examples/;
#   2. the published schemas: action.yml (github-actions), the workflow
#      template (github-workflows), the GitLab component's two documents and
#      its include (gitlab-ci), with check-jsonschema's vendored schemas, and
#      .pre-commit-hooks.yaml with `pre-commit validate-manifest` (both
#      installed with pip when missing);
#   when a Docker engine answers (otherwise said, and skipped):
#   3. the image, built by ci/build-image.sh from the debug binary this run
#      already built ($ROLLSAFE_TEST_BINARY, else $CARGO_TARGET_DIR/debug/
#      rollsafe, built when missing) as rollsafe-test:<version>/latest;
#   4. the image contract on examples/bookshop: exit 0; the bookshop plus a
#      blocking index build: exit 1 with `::error file=…,line=…`;
#   5. action.yml's script, run as the runner would (inputs as its env,
#      GITHUB_* files), on the bookshop on PostgreSQL 18: annotations,
#      summary, JUnit output; PostgreSQL 13 as an unknown uid (nss_wrapper);
#      with `capture`, on a pull request cloned as actions/checkout does
#      (only its commit): the target branch fetched, rollsafe copied out of
#      the image and run on this machine (the "runner", python3 with
#      psycopg), both app versions captured, the hidden rows an annotation
#      and the apps and readers in the summary; without a pull request's
#      target, capture asks for `base`;
#   6. the GitLab component's script and the pre-commit hook from the image
#      (static precheck: no database), on the harmful variant.
#
# Every stage prints `[ci/test-install.sh] <stage> took Ns`; the script
# exits non-zero when any stage fails and removes the containers and test
# images it created.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "[ci/test-install.sh] $*"; }
# Stages run in a subshell: a failed check ends its stage.
fail() { say "FAILED: $*"; exit 1; }

# Runs a stage and prints how long it took, also when it fails; the run
# stops at the first failing stage.
stage() {
  local name="$1" started=$SECONDS rc=0
  shift
  say "$name"
  ("$@") || rc=$?
  say "$name took $((SECONDS - started))s"
  if [ "$rc" != 0 ]; then
    say "stage '$name' failed (exit $rc); findings that failed it:"
    grep -E '^  ERROR|^::error|^rollsafe: error' "$WORK/out.txt" "$WORK/err.txt" 2>/dev/null || true
    exit 1
  fi
}
started_all=$SECONDS
TEST_IMAGE=rollsafe-test
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rollsafe-test-install.XXXXXX")"
docker_answers=false
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  docker_answers=true
fi

cleanup() {
  if $docker_answers; then
    docker ps -aq --filter "ancestor=$TEST_IMAGE:latest" | xargs -r docker rm -f >/dev/null 2>&1 || true
    docker images --format '{{.Repository}}:{{.Tag}}' "$TEST_IMAGE" | xargs -r docker rmi >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- 1. the crate -----------------------------------------------------------

package_list() {
  local list="$WORK/package-list.txt" f missing=0
  cargo package --list --locked --allow-dirty >"$list" 2>"$WORK/package.err" \
    || { cat "$WORK/package.err"; fail "cargo package --list failed"; }
  say "cargo package ships $(wc -l <"$list") files"
  # What the build reads: build.rs's inputs and every included file.
  local needed=(Cargo.toml Cargo.lock README.md build.rs src/lib.rs src/main.rs migrations/schema.json)
  for f in migrations/*.sql src/dao/*.sql src/dao/seed/*.sql; do needed+=("$f"); done
  while read -r f; do needed+=("$f"); done < <(
    grep -roE 'include_(str|bytes)!\("[^"]+"\)' src --include='*.rs' |
      sed -E 's|^(.*)/[^/]*:include_[a-z]+!\("([^"]+)"\)$|\1/\2|' |
      python3 -c 'import os,sys; [print(os.path.normpath(l.strip())) for l in sys.stdin]' | sort -u)
  for f in "${needed[@]}"; do
    grep -qxF "$f" "$list" || { say "not shipped but needed by the build: $f"; missing=1; }
  done
  [ "$missing" = 0 ] || fail "cargo package leaves out files the build needs"
  if grep -E '^(ci|\.ci|tests|benches|examples|target)/' "$list"; then
    fail "cargo package ships CI scripts, tests, benches or examples (above)"
  fi
  # Nothing big: every shipped file under 100 KB (Cargo.lock is the largest).
  while read -r f; do
    [ -f "$f" ] || continue
    [ "$(stat -c %s "$f")" -lt 100000 ] || fail "cargo package ships $f ($(stat -c %s "$f") bytes)"
  done <"$list"
  say "cargo package --list: every build input shipped (${#needed[@]} checked), no ci/, .ci/, tests/, benches/, examples/"
}

# --- 2. the published schemas ----------------------------------------------

ensure_validators() {
  command -v check-jsonschema >/dev/null 2>&1 && command -v pre-commit >/dev/null 2>&1 && return 0
  say "installing check-jsonschema and pre-commit (pip)"
  python3 -m pip install --quiet check-jsonschema pre-commit 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages check-jsonschema pre-commit
}

validate_schemas() {
  ensure_validators
  check-jsonschema --builtin-schema vendor.github-actions action.yml
  check-jsonschema --builtin-schema vendor.github-workflows ci/templates/github-actions.yml
  # A component is two YAML documents: the `spec:` header and the jobs.
  python3 - "$WORK" <<'EOF'
import sys
head, body = open("templates/rollsafe.yml").read().split("\n---\n")
open(sys.argv[1] + "/component-spec.yml", "w").write(head + "\n")
open(sys.argv[1] + "/component-jobs.yml", "w").write(body)
EOF
  check-jsonschema --builtin-schema vendor.gitlab-ci "$WORK/component-spec.yml" "$WORK/component-jobs.yml"
  check-jsonschema --builtin-schema vendor.gitlab-ci ci/templates/gitlab-ci.yml
  pre-commit validate-manifest .pre-commit-hooks.yaml
  say "pre-commit validate-manifest .pre-commit-hooks.yaml: ok"
}

# --- 3. the image ------------------------------------------------------------

build_image() {
  local binary="${ROLLSAFE_TEST_BINARY:-${CARGO_TARGET_DIR:-target}/debug/rollsafe}"
  if [ ! -x "$binary" ]; then
    say "$binary missing: building it (cargo build --locked --bin rollsafe)"
    cargo build --locked --bin rollsafe
  fi
  bash ci/build-image.sh --binary "$binary" --tag "$TEST_IMAGE"
  docker image inspect "$TEST_IMAGE:latest" >/dev/null
  [ "$(docker image inspect --format '{{.Config.User}}' "$TEST_IMAGE:latest")" = "1001:1001" ] \
    || fail "the image does not run as the non-root user 1001"
}

# A copy of the bookshop, writable by any uid (the image runs as 1001);
# with a blocking index build when $2 is `harmful`.
bookshop_copy() {
  local dir="$WORK/$1"
  rm -rf "$dir"
  cp -r examples/bookshop "$dir"
  if [ "${2:-}" = harmful ]; then
    printf -- '-- Speeds up the catalogue search by title.\nCREATE INDEX books_title_idx ON books (title);\n' \
      >"$dir/migrations/V5__books_title_idx.sql"
  fi
  chmod -R a+rwX "$dir"
  echo "$dir"
}

# Runs the image on project $1 with the remaining arguments; output in
# $WORK/out.txt (stdout) and $WORK/err.txt; sets CODE.
run_image() {
  local dir="$1"
  shift
  CODE=0
  docker run --rm -v "$dir:/project" -w /project "$@" >"$WORK/out.txt" 2>"$WORK/err.txt" || CODE=$?
}

image_verifies_bookshop() {
  local dir started=$SECONDS
  dir="$(bookshop_copy bookshop)"
  run_image "$dir" "$TEST_IMAGE:latest" verify
  say "docker run … verify on examples/bookshop: exit $CODE in $((SECONDS - started))s; $(grep -E '^(PASSED|FAILED)' "$WORK/out.txt" || true)"
  [ "$CODE" = 0 ] || { tail -n 40 "$WORK/out.txt" "$WORK/err.txt"; fail "expected exit 0 on the bookshop"; }
  grep -q 'local postgres (/usr/lib/postgresql/15/bin)' "$WORK/out.txt" || fail "not rehearsed on the image's PostgreSQL 15"
}

image_refuses_blocking_index() {
  local dir
  dir="$(bookshop_copy harmful harmful)"
  run_image "$dir" "$TEST_IMAGE:latest" verify --format github
  say "docker run … verify --format github on the bookshop + a blocking index build: exit $CODE"
  grep '^::error ' "$WORK/out.txt" || true
  [ "$CODE" = 1 ] || { tail -n 40 "$WORK/out.txt" "$WORK/err.txt"; fail "expected exit 1 (error findings)"; }
  grep -qE '^::error file=/project/migrations/V5__books_title_idx\.sql,line=2,.*title=locks\.blocking-index-build::' "$WORK/out.txt" \
    || fail "no ::error annotation at V5__books_title_idx.sql line 2 (locks.blocking-index-build)"
}

# --- 5. the GitHub Action -----------------------------------------------------

# Writes action.yml's step as a script: its env (inputs substituted from
# $WORK/inputs.json over the defaults) and its run text, as the runner runs
# a `shell: bash` step. Any expression other than `${{ inputs.X }}` fails.
action_script() {
  python3 - "$WORK/inputs.json" >"$WORK/action-step.sh" <<'EOF'
import json, re, shlex, sys, yaml
action = yaml.safe_load(open("action.yml"))
given = json.load(open(sys.argv[1]))
inputs = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
inputs.update(given)
unknown = set(given) - set(action["inputs"])
assert not unknown, f"inputs not declared in action.yml: {unknown}"
steps = action["runs"]["steps"]
assert action["runs"]["using"] == "composite", "a composite action expected"
# The verify step; the SARIF upload to code scanning, only when the
# `sarif` input asks for it (off by default: it needs security-events:
# write); the comment step, on pull requests only
# (action/review-comment.py, tested by ci/test-comment.py).
assert [s.get("id") for s in steps] == ["verify", "code-scanning", "comment"], "the verify, code-scanning and comment steps expected"
upload = steps[1]
assert upload["uses"].startswith("github/codeql-action/upload-sarif@"), upload
assert "inputs.sarif == 'true'" in upload["if"], "the SARIF upload must be off unless asked for"
assert action["inputs"]["sarif"].get("default") == "false", "sarif must default to off"
for s in steps:
    assert "${{" not in s.get("run", ""), f"step {s['id']}: the script must read inputs from its env only"
step = steps[0]
assert step["shell"] == "bash"
def resolve(text):
    def one(m):
        expr = m.group(1).strip()
        k = re.fullmatch(r"inputs\.([A-Za-z0-9_-]+)", expr)
        assert k, f"expression not simulated: {expr}"
        return inputs[k.group(1)]
    return re.sub(r"\$\{\{(.*?)\}\}", one, text)
assert "${{" not in step["run"], "the script must read inputs from its env only"
print("#!/usr/bin/env bash")
for k, v in step.get("env", {}).items():
    print(f"export {k}={shlex.quote(resolve(str(v)))}")
print(step["run"])
EOF
}

action_on_bookshop_pg18() {
  local dir runner="$WORK/runner"
  dir="$(bookshop_copy action)"
  mkdir -p "$runner/temp"
  : >"$runner/summary.md"
  : >"$runner/output"
  printf '{"image": "%s:latest", "postgres-versions": "18"}' "$TEST_IMAGE" >"$WORK/inputs.json"
  action_script
  CODE=0
  (cd "$dir" && GITHUB_WORKSPACE="$dir" RUNNER_TEMP="$runner/temp" \
    GITHUB_STEP_SUMMARY="$runner/summary.md" GITHUB_OUTPUT="$runner/output" \
    bash --noprofile --norc -eo pipefail "$WORK/action-step.sh" >"$WORK/out.txt" 2>"$WORK/err.txt") || CODE=$?
  say "action.yml's step on the bookshop, postgres-versions 18: exit $CODE; outputs: $(tr '\n' ' ' <"$runner/output")"
  [ "$CODE" = 0 ] || { tail -n 40 "$WORK/out.txt" "$WORK/err.txt"; fail "expected exit 0"; }
  grep -q 'PostgreSQL 18' "$WORK/out.txt" || fail "not rehearsed on PostgreSQL 18"
  grep -qxF "junit=$dir/rollsafe-verify.xml" "$runner/output" || fail "no junit output naming $dir/rollsafe-verify.xml"
  grep -qxF "exit-code=0" "$runner/output" || fail "no exit-code=0 output"
  grep -q '<testsuites' "$dir/rollsafe-verify.xml" || fail "the JUnit report is not JUnit"
  grep -q 'PASSED\|passed' "$runner/summary.md" || { head "$runner/summary.md"; fail "no Markdown summary in GITHUB_STEP_SUMMARY"; }
  # The warning on V4 is annotated at the file as the runner sees it.
  grep -qE "^::warning file=$dir/migrations/V4__orders_drop_gift_note\.sql,line=5," "$WORK/out.txt" \
    || fail "no ::warning annotation at the checkout's V4 line 5"
}

# A pull request as CI checks it out: origin's main holds V1 and the
# recipe box's first app version, the pull request adds V2 (a default that
# hides the old rows) and the second; the clone in $1 holds only the pull
# request's commit (so the base must be fetched). Fails when python3 has
# no psycopg (the recipe box's tests need it).
pull_request_clone() {
  local dir="$1" origin="$WORK/origin.git" src="$WORK/pr-src"
  python3 -c 'import psycopg' 2>/dev/null \
    || fail "python3 has no psycopg: the recipe box's tests cannot run (pip install 'psycopg[binary]')"
  rm -rf "$origin" "$src" "$dir"
  mkdir -p "$src/db/migrations" "$src/app"
  cp examples/recipe-box/migrations/V1__cooks_and_recipes.sql "$src/db/migrations/"
  cp examples/recipe-box/python/v1/test_recipes.py "$src/app/test.py"
  g() { git -C "$src" -c user.email=ci@example.org -c user.name=ci "$@"; }
  g init -q -b main && g add -A && g commit -qm "V1 and the first app version"
  g checkout -qb pr
  cp examples/recipe-box/variants/V2__published_hidden.sql "$src/db/migrations/V2__published.sql"
  cp examples/recipe-box/python/v2/test_recipes.py "$src/app/test.py"
  g add -A && g commit -qm "V2 and the second app version"
  git clone -q --bare "$src" "$origin"
  git clone -q --depth 1 --branch pr "file://$origin" "$dir"
  ! git -C "$dir" rev-parse --verify --quiet origin/main >/dev/null || fail "the clone has origin/main: the fetch would not be tested"
}

# With `capture` the step fetches main, copies rollsafe out of the image
# and runs it here, on the runner's toolchain.
action_captures_a_pull_request() {
  local dir="$WORK/pr" runner="$WORK/runner-capture"
  pull_request_clone "$dir"
  rm -rf "$runner"
  mkdir -p "$runner/temp"
  : >"$runner/summary.md"
  : >"$runner/output"
  printf '{"image": "%s:latest", "migrations": "db/migrations", "capture": "python3 app/test.py", "args": "--rows 500"}' \
    "$TEST_IMAGE" >"$WORK/inputs.json"
  action_script
  # Not a pull request and no base: said before anything runs.
  CODE=0
  (cd "$dir" && GITHUB_WORKSPACE="$dir" RUNNER_TEMP="$runner/temp" \
    bash --noprofile --norc -eo pipefail "$WORK/action-step.sh" >"$WORK/out.txt" 2>"$WORK/err.txt") || CODE=$?
  [ "$CODE" = 2 ] && grep -q '^::error title=rollsafe::capture .*give the base input' "$WORK/out.txt" \
    || { cat "$WORK/out.txt" "$WORK/err.txt"; fail "expected exit 2 asking for base outside a pull request"; }
  CODE=0
  (cd "$dir" && GITHUB_WORKSPACE="$dir" GITHUB_BASE_REF=main RUNNER_TEMP="$runner/temp" \
    GITHUB_STEP_SUMMARY="$runner/summary.md" GITHUB_OUTPUT="$runner/output" \
    bash --noprofile --norc -eo pipefail "$WORK/action-step.sh" >"$WORK/out.txt" 2>"$WORK/err.txt") || CODE=$?
  say "action.yml's step with capture on a pull request adding a hidden default: exit $CODE; $(grep -E '^(PASSED|FAILED)' "$WORK/out.txt" || true)"
  grep -E '^rollsafe verify: |^  sandbox: ' "$WORK/err.txt" "$WORK/out.txt" || true
  [ "$CODE" = 1 ] || { tail -n 40 "$WORK/out.txt" "$WORK/err.txt"; fail "expected exit 1 (the old rows hidden)"; }
  grep -q -- '--base origin/main: 1 migration(s) there, 1 added here' "$WORK/err.txt" \
    || fail "origin/main was not fetched and used as the base"
  # At the file as the repository has it (the runner maps it to the diff).
  grep -qE '^::error file=db/migrations/V2__published\.sql,line=1,title=backfill\.new-readers-miss-rows::' "$WORK/out.txt" \
    || fail "no ::error annotation at V2 (backfill.new-readers-miss-rows)"
  grep -qF '| `base` | V1 |' "$runner/summary.md" && grep -qF '| `head` | V2 |' "$runner/summary.md" \
    || { cat "$runner/summary.md"; fail "the summary does not list the captured apps"; }
  grep -qF -- "- V2: **rows lost**: head's" "$runner/summary.md" \
    || { cat "$runner/summary.md"; fail "the summary does not list the readers compared"; }
  [ -z "$(git -C "$dir" status --porcelain --untracked-files=all -- . ':!rollsafe-verify.xml')" ] \
    || { git -C "$dir" status --porcelain; fail "the step left files in the checkout"; }
}

image_pg13_as_unknown_uid() {
  local dir
  dir="$(bookshop_copy pg13)"
  run_image "$dir" --tmpfs /tmp --user 4242:4242 "$TEST_IMAGE:latest" verify --postgres-version 13
  say "docker run --user 4242:4242 … verify --postgres-version 13 on the bookshop: exit $CODE; $(grep -E '^(PASSED|FAILED)' "$WORK/out.txt" || true)"
  [ "$CODE" = 0 ] || { tail -n 40 "$WORK/out.txt" "$WORK/err.txt"; fail "expected exit 0"; }
  grep -q 'PostgreSQL 13' "$WORK/out.txt" || fail "not rehearsed on PostgreSQL 13"
}

# --- 6. the GitLab component and the pre-commit hook --------------------------

# Writes the component's rollsafe-verify job as a script: its variables
# (inputs substituted from $WORK/inputs.json over the spec's defaults) and
# its script, as the runner runs them.
component_script() {
  python3 - "$WORK/inputs.json" >"$WORK/component.sh" <<'EOF'
import json, re, shlex, sys, yaml
head, body = open("templates/rollsafe.yml").read().split("\n---\n")
spec = yaml.safe_load(head)["spec"]["inputs"]
given = json.load(open(sys.argv[1]))
assert not set(given) - set(spec), f"inputs not declared in the component: {set(given) - set(spec)}"
inputs = {k: str(v.get("default", "")) for k, v in spec.items()}
inputs.update(given)
job = yaml.safe_load(re.sub(r"\$\[\[\s*inputs\.([A-Za-z0-9_-]+)\s*\]\]", lambda m: inputs[m.group(1)], body))["rollsafe-verify"]
assert job["image"]["entrypoint"] == [""]
for k, v in job["variables"].items():
    print(f"export {k}={shlex.quote(str(v))}")
print("\n".join(job["script"]))
EOF
}

component_static() {
  local dir
  dir="$(bookshop_copy gitlab harmful)"
  printf '{"args": "--static-only", "fail-on": "warning"}' >"$WORK/inputs.json"
  component_script
  CODE=0
  docker run --rm -i -v "$dir:/builds/shop" -w /builds/shop -e CI_PROJECT_DIR=/builds/shop \
    --entrypoint sh "$TEST_IMAGE:latest" -e /dev/stdin <"$WORK/component.sh" >"$WORK/out.txt" 2>&1 || CODE=$?
  say "the GitLab component's script (--static-only, fail-on warning) on the harmful bookshop: exit $CODE"
  [ "$CODE" = 1 ] || { tail -n 30 "$WORK/out.txt"; fail "expected exit 1 (warnings and fail-on warning)"; }
  grep -q '"path": "migrations/V5__books_title_idx.sql"' "$dir/gl-code-quality-report.json" \
    || { cat "$dir/gl-code-quality-report.json"; fail "Code Quality paths are not relative to the project root"; }
  grep -q '<testsuites' "$dir/rollsafe-verify.xml" || fail "no JUnit artifact"
  [ -s "$dir/rollsafe-verify.md" ] || fail "no Markdown artifact"
}

# The component with `capture` runs in the project's own image: here this
# machine stands in for it (git, python3 with psycopg, PostgreSQL, the
# debug binary on PATH), on a merge request whose target the clone lacks.
component_captures_a_merge_request() {
  local dir="$WORK/mr" binary="${ROLLSAFE_TEST_BINARY:-${CARGO_TARGET_DIR:-target}/debug/rollsafe}" bindir
  [ -x "$binary" ] || cargo build --locked --bin rollsafe
  bindir="$(cd "$(dirname "$binary")" && pwd)"
  pull_request_clone "$dir"
  printf '{"migrations": "db/migrations", "capture": "python3 app/test.py", "args": "--rows 500"}' >"$WORK/inputs.json"
  component_script
  CODE=0
  (cd "$dir" && PATH="$bindir:$PATH" CI_PROJECT_DIR="$dir" \
    CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main sh -e "$WORK/component.sh" >"$WORK/out.txt" 2>&1) || CODE=$?
  say "the GitLab component's script with capture on a merge request adding a hidden default: exit $CODE"
  [ "$CODE" = 1 ] || { tail -n 40 "$WORK/out.txt"; fail "expected exit 1 (the old rows hidden)"; }
  grep -q -- '--base origin/main: 1 migration(s) there, 1 added here' "$WORK/out.txt" \
    || fail "origin/main was not fetched and used as the base"
  grep -q '"check_name": "backfill.new-readers-miss-rows"' "$dir/gl-code-quality-report.json" \
    || { cat "$dir/gl-code-quality-report.json"; fail "no Code Quality entry for the hidden rows"; }
  grep -qF -- "- V2: **rows lost**: head's" "$dir/rollsafe-verify.md" \
    || { cat "$dir/rollsafe-verify.md"; fail "the Markdown artifact does not list the readers compared"; }
}

precommit_hook_from_image() {
  local dir
  dir="$(bookshop_copy precommit harmful)"
  # The manifest's docker hook, pointed at the test image (pre-commit runs
  # it as the caller's uid, the checkout in /src).
  python3 - "$TEST_IMAGE:latest" >"$dir/.pre-commit-config.yaml" <<'EOF'
import sys, yaml
hooks = yaml.safe_load(open(".pre-commit-hooks.yaml"))
hook = next(h for h in hooks if h["id"] == "rollsafe-static-docker")
hook["entry"] = sys.argv[1] + " " + hook["entry"].split(" ", 1)[1]
print(yaml.safe_dump({"repos": [{"repo": "local", "hooks": [hook]}]}))
EOF
  CODE=0
  (cd "$dir" && git init -q && git add -A && PRE_COMMIT_HOME="$WORK/pre-commit-home" \
    pre-commit run --all-files >"$WORK/out.txt" 2>&1) || CODE=$?
  say "pre-commit run (hook rollsafe-static-docker) on the harmful bookshop: exit $CODE"
  grep -q 'static.require-concurrent-index-creation' "$WORK/out.txt" \
    || { cat "$WORK/out.txt"; fail "the hook did not report the blocking index build"; }
  [ "$CODE" = 0 ] || { cat "$WORK/out.txt"; fail "expected exit 0 (static findings are warnings)"; }
  # A migration rollsafe cannot read fails the hook.
  printf 'SELECT 1;\n' >"$dir/migrations/V5__books_title_idx.sql"
  cp "$dir/migrations/V5__books_title_idx.sql" "$dir/migrations/V05__duplicate_version.sql"
  CODE=0
  (cd "$dir" && git add -A && PRE_COMMIT_HOME="$WORK/pre-commit-home" \
    pre-commit run --all-files >"$WORK/out.txt" 2>&1) || CODE=$?
  say "pre-commit run with two migrations of one version: exit $CODE"
  [ "$CODE" != 0 ] || { cat "$WORK/out.txt"; fail "expected the hook to fail"; }
}

stage "cargo package file list" package_list
stage "schemas (check-jsonschema, pre-commit validate-manifest)" validate_schemas
if $docker_answers; then
  stage "image build (ci/build-image.sh, debug binary)" build_image
  stage "image: verify examples/bookshop" image_verifies_bookshop
  stage "image: verify the bookshop + a blocking index build (--format github)" image_refuses_blocking_index
  stage "action.yml on the bookshop, PostgreSQL 18" action_on_bookshop_pg18
  stage "action.yml with capture on a pull request (on the runner)" action_captures_a_pull_request
  stage "image: PostgreSQL 13 as an unknown uid" image_pg13_as_unknown_uid
  stage "GitLab component (static) on the harmful bookshop" component_static
  stage "GitLab component with capture, in the project's image (this machine)" component_captures_a_merge_request
  stage "pre-commit hook from the image" precommit_hook_from_image
else
  say "no Docker engine answers: the image, the action, the component and the hook's image are not tested on this machine (skipped)"
fi
say "all passed; ci/test-install.sh took $((SECONDS - started_all))s"
