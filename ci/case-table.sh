#!/usr/bin/env bash
# The verdict table: cases whose verdict must not change (bad -> error,
# good -> zero errors). Not part of ci/test.sh (the suite holds the same
# hazards as tests); run it before and after a change to verify's core and
# diff the two outputs:
#
#   bash ci/case-table.sh target/debug/rollsafe /tmp/cases-before
#   bash ci/case-table.sh target/debug/rollsafe /tmp/cases-after
#   diff -r /tmp/cases-before /tmp/cases-after
#
# Each case writes OUT/<case>.txt: the exit code, then the sorted
# `severity:id migration` of every error, warning and skipped finding.
# ROLLSAFE_POSTGRES picks the backend (default: local).
set -uo pipefail
bin=$(realpath "$1"); out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
export ROLLSAFE_POSTGRES=${ROLLSAFE_POSTGRES:-local}
# CASES="seedbug partidx" runs only those; the case folders and reports are
# kept in OUT/work for a look at the messages.
mkdir -p "$out"; work=$(realpath "$out")/work; rm -rf "$work"; mkdir -p "$work"
wanted() { [[ -z "${CASES:-}" || " $CASES " == *" $1 "* ]]; }

# A copy of the shipped migrations plus a V4 with the given SQL.
with_v4() { # case sql
  mkdir -p "$work/$1"; cp "$root"/migrations/V*.sql "$work/$1/"
  printf '%s\n' "$2" > "$work/$1/V4__case.sql"
}
with_v4 harmless 'CREATE SCHEMA audit;
CREATE TABLE audit.events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text);
ALTER TABLE attached_functions ADD COLUMN note text;'
with_v4 setnotnull 'ALTER TABLE attached_functions ALTER COLUMN last_run SET NOT NULL;'
with_v4 partidx 'CREATE SCHEMA billing;
CREATE TABLE billing.events (id bigint NOT NULL, at date NOT NULL, amount numeric) PARTITION BY RANGE (at);
CREATE TABLE billing.events_2025 PARTITION OF billing.events FOR VALUES FROM ('"'"'2025-01-01'"'"') TO ('"'"'2026-01-01'"'"');
CREATE TABLE billing.events_2026 PARTITION OF billing.events FOR VALUES FROM ('"'"'2026-01-01'"'"') TO ('"'"'2027-01-01'"'"');'
mkdir -p "$work/partidx"; printf '%s\n' '-- rollsafe:no-transaction
CREATE INDEX IF NOT EXISTS events_at ON ONLY billing.events (at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_2025_at ON billing.events_2025 (at);
ALTER INDEX billing.events_at ATTACH PARTITION billing.events_2025_at;
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_2026_at ON billing.events_2026 (at);
ALTER INDEX billing.events_at ATTACH PARTITION billing.events_2026_at;' > "$work/partidx/V5__case_index.sql"
with_v4 unlogged 'CREATE UNLOGGED TABLE scratch (id bigint PRIMARY KEY, body text);'
with_v4 hostile "COPY (SELECT 1) TO PROGRAM 'id';"
with_v4 otherschema 'CREATE SCHEMA sales;
CREATE TABLE sales.orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL);
CREATE INDEX orders_customer ON sales.orders (customer);'
with_v4 volatile 'ALTER TABLE attached_functions ADD COLUMN token uuid NOT NULL DEFAULT gen_random_uuid();'
mkdir -p "$work/seedbug"; cp "$root"/migrations/V*.sql "$work/seedbug/"
sed -i 's/ADD COLUMN is_ready boolean NOT NULL DEFAULT true/ADD COLUMN is_ready boolean NOT NULL DEFAULT false/' "$work/seedbug/V3__attached_functions_is_ready.sql"
grep -q 'DEFAULT false' "$work/seedbug/V3__attached_functions_is_ready.sql" || { echo "seedbug: V3 no longer has the line to change" >&2; exit 2; }

run() { # case args...
  local case=$1; shift
  wanted "$case" || return 0
  (cd "$root" && "$bin" verify --format json "$@" > "$work/$case.json" 2> "$work/$case.err"); local rc=$?
  python3 - "$work/$case.json" "$rc" > "$out/$case.txt" <<'PY'
import json, sys
path, rc = sys.argv[1], sys.argv[2]
print(f"exit {rc}")
try:
    report = json.load(open(path))
except Exception as e:
    print(f"no report ({e})"); sys.exit()
lines = set()
for f in report.get('findings', []):
    sev = str(f.get('severity', '')).lower()
    if sev in ('error', 'warn', 'skipped'):
        lines.add(f"{sev}:{f.get('id')} {f.get('migration', '')}")
print("\n".join(sorted(lines)))
PY
  printf '%-12s %s\n' "$case" "$(head -1 "$out/$case.txt"), $(grep -c '^error' "$out/$case.txt") errors, $(grep -c '^warn' "$out/$case.txt") warnings, $(grep -c '^skipped' "$out/$case.txt") skipped"
}
run shipped
run bookshop --config examples/bookshop/rollsafe.toml
for c in harmless setnotnull seedbug partidx unlogged hostile otherschema volatile; do
  run "$c" --migrations "$work/$c"
done
