#!/usr/bin/env bash
# The deploy sequence for a DBA or a pipeline, in the order that is safe:
#
#   1. verify              rehearse every migration in throwaway Postgres
#   2. status              what the target database has applied / lacks
#   3. migrate --dry-run   the plan and the SQL that would run on the target
#   4. migrate             apply (one migrator at a time, bounded lock waits)
#   5. check               read-only audit of the target after the change
#
# It stops at the first step that fails and prints a summary saying which
# step failed, with what exit code, and what to do.
#
# Usage:
#   DATABASE_URL=postgres://user:pass@host/db ci/pre-deploy.sh [--migrations DIR] [--yes]
#
#   --migrations DIR  the migrations to apply (default: those embedded in rollsafe)
#   --yes             do not ask before step 4 (pipelines); without it, a
#                     terminal is asked to confirm after seeing the plan
#   ROLLSAFE          path of the rollsafe binary (default: build it here)
#
# Never prints the password: rollsafe redacts every URL it shows.
set -uo pipefail
cd "$(dirname "$0")/.."

migrations=()
assume_yes=0
while [ $# -gt 0 ]; do
  case "$1" in
    --migrations) migrations=(--migrations "$2"); shift 2 ;;
    --yes) assume_yes=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "pre-deploy: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "${DATABASE_URL:-}" ]; then
  echo "pre-deploy: DATABASE_URL is not set; export the target database's URL and run again" >&2
  exit 2
fi

if [ -z "${ROLLSAFE:-}" ]; then
  echo "[pre-deploy] building rollsafe"
  cargo build --release --locked --quiet || { echo "pre-deploy: build failed" >&2; exit 2; }
  ROLLSAFE=./target/release/rollsafe
fi

summary=()
step() {
  local name="$1"; shift
  echo
  echo "[pre-deploy] step: $name"
  "$ROLLSAFE" "$@"
  local rc=$?
  if [ $rc -ne 0 ]; then
    summary+=("FAILED  $name (exit $rc)")
    echo
    echo "== pre-deploy summary"
    printf '  %s\n' "${summary[@]}"
    case "$name" in
      verify) echo "  -> a migration is not safe to roll out (or verify could not run); read the findings above, fix the migration, run again. Nothing was applied." ;;
      status|dry-run) echo "  -> the target database does not match the migration files (or is unreachable); read the message above. Nothing was applied." ;;
      migrate) echo "  -> the migration was refused or failed; the history shows exactly what was applied (rollsafe status). Fix the cause named above and rerun; applied migrations are never rerun." ;;
      check) echo "  -> the migrations were applied but the audit found a problem; read the findings above before rolling out the new app." ;;
    esac
    exit $rc
  fi
  summary+=("ok      $name")
}

step verify verify "${migrations[@]}"
step status status "${migrations[@]}"
step dry-run migrate --dry-run "${migrations[@]}"
if [ $assume_yes -eq 0 ] && [ -t 0 ]; then
  read -r -p "[pre-deploy] apply the plan above to the target database? [y/N] " answer
  case "$answer" in
    y|Y|yes) ;;
    *) summary+=("stopped before migrate (not confirmed)"); printf '  %s\n' "${summary[@]}"; exit 1 ;;
  esac
fi
step migrate migrate "${migrations[@]}"
step check check "${migrations[@]}"

echo
echo "== pre-deploy summary"
printf '  %s\n' "${summary[@]}"
echo "  -> schema is at the latest version and audited; roll out the new app now."
