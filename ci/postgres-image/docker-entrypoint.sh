#!/usr/bin/env bash
# Entrypoint of the locally built stand-ins for the official `postgres:<major>`
# images (built by ci/build-postgres-image.sh when no registry is reachable),
# the same for every major (13, 15, 17, 18).
#
# It mimics the parts of the official entrypoint that rollsafe's tests (via
# testcontainers-modules' Postgres image) rely on:
#   * arguments starting with `-` are passed to `postgres`;
#   * started as root: prepare $PGDATA and the socket dir, re-exec as `postgres`;
#   * on an empty $PGDATA: initdb with POSTGRES_USER / POSTGRES_PASSWORD /
#     POSTGRES_DB / POSTGRES_HOST_AUTH_METHOD / POSTGRES_INITDB_ARGS, run
#     /docker-entrypoint-initdb.d/* on a temporary socket-only server whose
#     log goes to STDOUT, then stop it;
#   * finally exec the real server (log on STDERR), listening on all addresses.
# So "database system is ready to accept connections" appears once on stdout
# (temporary server) and once on stderr (final server), as testcontainers
# expects.
set -Eeuo pipefail

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

log() { printf 'docker-entrypoint: %s\n' "$*"; }
die() { printf 'docker-entrypoint: error: %s\n' "$*" >&2; exit 1; }

# `docker run IMAGE -c fsync=off` means `postgres -c fsync=off`.
if [ "$#" -eq 0 ] || [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

# Anything else (bash, psql, ...) is run as is.
if [ "$1" != 'postgres' ]; then
	exec "$@"
fi

if [ "$(id -u)" = '0' ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA"
	chmod 700 "$PGDATA"
	chown postgres:postgres /var/run/postgresql
	chmod 3777 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

shift # drop "postgres"; "$@" now holds the server options

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	POSTGRES_USER="${POSTGRES_USER:-postgres}"
	POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
	POSTGRES_PASSWORD="${POSTGRES_PASSWORD:-}"

	if [ -z "$POSTGRES_PASSWORD" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != 'trust' ]; then
		die "database is uninitialized and superuser password is not specified.
  You must specify POSTGRES_PASSWORD to a non-empty value for the superuser,
  e.g. \"-e POSTGRES_PASSWORD=password\" on \"docker run\", or set
  POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password
  (not recommended)."
	fi

	log "initializing database cluster in $PGDATA (user $POSTGRES_USER)"
	initdb_args=(--username="$POSTGRES_USER")
	pwfile=''
	if [ -n "$POSTGRES_PASSWORD" ]; then
		pwfile="$(mktemp)"
		printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
		initdb_args+=(--pwfile="$pwfile")
	fi
	# POSTGRES_INITDB_ARGS is word-split on purpose (same as the official image).
	# shellcheck disable=SC2086
	initdb "${initdb_args[@]}" ${POSTGRES_INITDB_ARGS:-}
	[ -z "$pwfile" ] || rm -f "$pwfile"

	# The host auth method must match how initdb hashed the password: the
	# server's password_encryption, md5 before PostgreSQL 14 and
	# scram-sha-256 from 14 (a scram-sha-256 line with an md5 hash refuses
	# every login). The official image decides it the same way.
	if [ -z "${POSTGRES_HOST_AUTH_METHOD:-}" ]; then
		POSTGRES_HOST_AUTH_METHOD="$(postgres -C password_encryption "$@")"
		case "$POSTGRES_HOST_AUTH_METHOD" in
		on | true) POSTGRES_HOST_AUTH_METHOD=md5 ;;
		esac
	fi

	if [ "$POSTGRES_HOST_AUTH_METHOD" = 'trust' ]; then
		log "warning: POSTGRES_HOST_AUTH_METHOD=trust, connections need no password"
	fi
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

	# Temporary server: unix socket only; pg_ctl sends its log to STDOUT.
	log "starting temporary server"
	# The user's server options (e.g. -c fsync=off) apply to it as well.
	temp_opts="-c listen_addresses='' -p ${PGPORT:-5432}"
	if [ "$#" -gt 0 ]; then
		temp_opts="$(printf '%q ' "$@")$temp_opts"
	fi
	PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -o "$temp_opts" -w start

	export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
	psql_cmd=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)

	if [ "$POSTGRES_DB" != 'postgres' ]; then
		log "creating database $POSTGRES_DB"
		"${psql_cmd[@]}" --dbname postgres --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi

	shopt -s nullglob
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				log "running $f"
				"$f"
			else
				log "sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql)
			log "running $f"
			"${psql_cmd[@]}" --dbname "$POSTGRES_DB" -f "$f"
			;;
		*.sql.gz)
			log "running $f"
			gunzip -c "$f" | "${psql_cmd[@]}" --dbname "$POSTGRES_DB"
			;;
		*)
			log "ignoring $f"
			;;
		esac
	done
	shopt -u nullglob
	unset PGPASSWORD

	log "stopping temporary server"
	pg_ctl -D "$PGDATA" -m fast -w stop
	log "init process complete; ready for start up"
else
	log "database directory $PGDATA already initialized; skipping initialization"
fi

# Final server: its log goes to STDERR.
exec postgres -c listen_addresses='*' "$@"
