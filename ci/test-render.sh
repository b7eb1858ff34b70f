#!/usr/bin/env bash
# The lock timelines as a reviewer sees them: renders the Mermaid charts of
# real Markdown reports in headless Chromium with the Mermaid library (the
# build nicegui vendors, pip-installed into a throwaway venv: nothing of it
# is kept in the repository) and fails on a Mermaid error or a chart whose
# bars do not match its source (ci/render-mermaid.py).
#
#   ci/test-render.sh [REPORTS_DIR]
#
# REPORTS_DIR holds the reports of the suite's report:: tests (ci/test.sh
# passes the ones its suite run wrote: ROLLSAFE_RENDER_DIR); without it, or
# when it is empty, those tests run here first (the local backend unless
# ROLLSAFE_POSTGRES says otherwise). First a broken chart must fail: the
# check can fail. Installs Chromium (apt) and the venv module when missing,
# as root, like ci/test.sh. ROLLSAFE_SCREENSHOT=docs/lock-timeline.png
# saves the blocking index build's timeline there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Mermaid build: nicegui vendors Mermaid 11 as an ES module build.
NICEGUI=nicegui==3.18.0

say() { echo "[ci/test-render.sh] $*"; }

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

command -v chromium >/dev/null 2>&1 || apt_install chromium fonts-dejavu-core

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv" >/dev/null 2>&1 || {
  apt_install python3-venv
  python3 -m venv "$work/venv"
}
started=$SECONDS
"$work/venv/bin/pip" install -q --disable-pip-version-check --no-deps "$NICEGUI"
dist=$(ls -d "$work"/venv/lib/python3*/site-packages/nicegui/elements/mermaid/dist)
[ -f "$dist/index.js" ] || { say "$NICEGUI has no Mermaid build at $dist"; exit 1; }
say "Mermaid from $NICEGUI in $((SECONDS - started))s"

reports="${1:-}"
if [ -z "$reports" ] || ! ls "$reports"/*.md >/dev/null 2>&1; then
  reports="$work/reports"
  mkdir -p "$reports"
  say "rehearsing the report:: tests' migrations for their reports"
  ROLLSAFE_RENDER_DIR="$reports" ROLLSAFE_POSTGRES="${ROLLSAFE_POSTGRES:-local}" \
    cargo test --locked --quiet --test suite -- report::
fi

# The negative control: a task whose name a colon emptied, as an
# unescaped label starting with `:` would be, is a Mermaid parse error.
printf '**V9** `x.sql`\n\n```mermaid\ngantt\n    dateFormat x\n    section s\n    : 0, 5\n```\n' >"$work/broken.md"
if python3 ci/render-mermaid.py "$dist" chromium "$work/broken.md" >"$work/broken.log" 2>&1; then
  cat "$work/broken.log"
  say "a broken chart rendered without an error: the check cannot fail"
  exit 1
fi
grep -q "Mermaid error" "$work/broken.log" || { cat "$work/broken.log"; exit 1; }
say "a broken chart fails: $(grep -m1 'Mermaid error' "$work/broken.log" | cut -c1-160)"

shot=()
if [ -n "${ROLLSAFE_SCREENSHOT:-}" ] && [ -f "$reports/blocking_index_build.md" ]; then
  shot=(--screenshot "$reports/blocking_index_build.md=$ROLLSAFE_SCREENSHOT")
fi
python3 ci/render-mermaid.py "$dist" chromium "$reports"/*.md "${shot[@]}"
