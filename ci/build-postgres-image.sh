#!/usr/bin/env bash
# Make sure the PostgreSQL container image used by rollsafe's tests exists in
# the local Docker engine.
#
# The tests start PostgreSQL through testcontainers-modules, which uses the
# image `postgres:15` (overridable with ROLLSAFE_POSTGRES_IMAGE) and only pulls
# it when it is not present locally. Run this script once before the tests
# (in CI, or on a machine without registry access):
#
#   1. image already present            -> nothing to do;
#   2. `docker pull` works              -> the official image is used;
#   3. otherwise (no registry reachable) -> build an equivalent image from
#      Debian bookworm packages (mmdebstrap + docker import) and tag it with
#      the expected name. Its entrypoint, ci/postgres-image/docker-entrypoint.sh,
#      mimics the official one (POSTGRES_USER/PASSWORD/DB, initdb scripts,
#      "ready to accept connections" on stdout then on stderr).
#
# Usage: ci/build-postgres-image.sh [IMAGE]
#   IMAGE defaults to $ROLLSAFE_POSTGRES_IMAGE, else postgres:15.
#   ROLLSAFE_DEBIAN_MIRROR overrides the Debian mirror (default: the one apt
#   on this machine uses for bookworm, else http://deb.debian.org/debian).
#
# Exit status: 0 image present/pulled/built; 3 no Docker engine answers (the
# caller decides whether tests fall back to local binaries); other non-zero
# values are failures. Building needs root (~1 min, ~500 MB download/disk).
set -euo pipefail

IMAGE="${1:-${ROLLSAFE_POSTGRES_IMAGE:-postgres:15}}"
PG_MAJOR=15
SUITE=bookworm
DEFAULT_MIRROR=http://deb.debian.org/debian
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENTRYPOINT_SRC="$SCRIPT_DIR/postgres-image/docker-entrypoint.sh"

say() { printf '[build-postgres-image] %s\n' "$*"; }
die() { printf '[build-postgres-image] error: %s\n' "$*" >&2; exit 1; }

# Print the URI of the first enabled `deb` source for $SUITE configured in apt
# (one-line *.list and deb822 *.sources formats); print nothing if none.
apt_mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v suite="$SUITE" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == suite) { print $i; exit }
			}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk -v suite="$SUITE" '
			BEGIN { RS = ""; FS = "\n" }
			{
				types = ""; uris = ""; suites = ""; enabled = "yes"
				for (j = 1; j <= NF; j++) {
					if ($j ~ /^#/) continue
					split($j, kv, ":[ \t]*")
					key = tolower(kv[1]); val = substr($j, length(kv[1]) + 2)
					sub(/^[ \t]+/, "", val)
					if (key == "types") types = " " val " "
					else if (key == "uris") uris = val
					else if (key == "suites") suites = " " val " "
					else if (key == "enabled") enabled = tolower(val)
				}
				if (enabled != "no" && types ~ / deb / && suites ~ (" " suite " ")) {
					split(uris, u, /[ \t]+/); print u[1]; exit
				}
			}' "$f"
	done
}

say "checking that a Docker engine answers"
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	printf '[build-postgres-image] no Docker engine answers (docker info failed); image %s not prepared\n' "$IMAGE" >&2
	exit 3
fi

say "looking for image $IMAGE locally"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
	say "image $IMAGE present"
	exit 0
fi

say "trying to pull $IMAGE (60 s timeout)"
if timeout 60 docker pull "$IMAGE"; then
	say "pulled $IMAGE"
	exit 0
fi
say "pull failed; building $IMAGE from Debian $SUITE packages (postgresql-$PG_MAJOR)"

[ "$(id -u)" = 0 ] || die "building the image needs root (mmdebstrap); re-run as root"
[ -r "$ENTRYPOINT_SRC" ] || die "entrypoint $ENTRYPOINT_SRC not found"

if ! command -v mmdebstrap >/dev/null 2>&1; then
	say "installing mmdebstrap with apt-get"
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y mmdebstrap
fi

MIRROR="${ROLLSAFE_DEBIAN_MIRROR:-$(apt_mirror | head -n 1)}"
MIRROR="${MIRROR:-$DEFAULT_MIRROR}"
say "using Debian mirror $MIRROR"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/rollsafe-pgimage.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
ROOTFS_TAR="$TMP/rootfs.tar"
cp "$ENTRYPOINT_SRC" "$TMP/docker-entrypoint.sh"

say "creating root filesystem tarball with mmdebstrap (minbase + postgresql-$PG_MAJOR)"
# Customize hooks run on the finished tree ("$1" is its root): drop the
# cluster the Debian package creates (the entrypoint runs initdb itself) and
# install the entrypoint. ($1 is expanded by the hook shell, not here.)
# shellcheck disable=SC2016
mmdebstrap \
	--variant=minbase \
	--include="postgresql-$PG_MAJOR" \
	--aptopt='Acquire::Check-Valid-Until "false"' \
	--customize-hook="rm -rf \"\$1/etc/postgresql/$PG_MAJOR/main\" \"\$1/var/lib/postgresql/$PG_MAJOR/main\"" \
	--customize-hook='mkdir -p "$1/docker-entrypoint-initdb.d" "$1/usr/local/bin"' \
	--customize-hook="install -m 0755 \"$TMP/docker-entrypoint.sh\" \"\$1/usr/local/bin/docker-entrypoint.sh\"" \
	"$SUITE" "$ROOTFS_TAR" "$MIRROR"

say "checking the tarball contains an executable entrypoint"
tar -tvf "$ROOTFS_TAR" ./usr/local/bin/docker-entrypoint.sh | grep '^-rwxr-xr-x' >/dev/null \
	|| die "entrypoint missing or not executable in $ROOTFS_TAR"

say "importing the tarball into Docker as $IMAGE"
docker import \
	--change "ENV PATH=/usr/lib/postgresql/$PG_MAJOR/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--change "ENV PGDATA=/var/lib/postgresql/data" \
	--change "ENV LANG=C.UTF-8" \
	--change "ENV PG_MAJOR=$PG_MAJOR" \
	--change "EXPOSE 5432" \
	--change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
	--change 'CMD ["postgres"]' \
	--message "rollsafe: postgresql-$PG_MAJOR from Debian $SUITE (ci/build-postgres-image.sh)" \
	- "$IMAGE" <"$ROOTFS_TAR" >/dev/null

say "image $IMAGE built: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$IMAGE")"
