#!/usr/bin/env bash
# Make sure the PostgreSQL container images used by rollsafe exist in the
# local Docker engine: `postgres:15` for the tests, and one image per major
# that production runs (13, 15, 17, 18) for rehearsing on each of them.
#
# rollsafe starts PostgreSQL through testcontainers-modules, which uses an
# image by name (`postgres:15` by default, ROLLSAFE_POSTGRES_IMAGE or
# --image otherwise, `postgres:<major>` when a major is requested) and only
# pulls it when it is not present locally. For each image asked for:
#
#   1. image already present            -> nothing to do;
#   2. `docker pull` works              -> the official image is used;
#   3. otherwise (no registry reachable) -> build an equivalent image from the
#      Debian suite that packages that major (mmdebstrap + docker import) and
#      tag it with the expected name:
#          13 -> bullseye   15 -> bookworm   17 -> trixie   18 -> sid
#      Its entrypoint, ci/postgres-image/docker-entrypoint.sh, mimics the
#      official one (POSTGRES_USER/PASSWORD/DB, initdb scripts, "ready to
#      accept connections" on stdout then on stderr), for every major.
#
# Usage: ci/build-postgres-image.sh [IMAGE...]
#        ci/build-postgres-image.sh --all
#   IMAGE defaults to $ROLLSAFE_POSTGRES_IMAGE, else postgres:15. The major
#   is the number the tag starts with (postgres:17, postgres:17-bookworm); a
#   tag without one (e.g. `latest`) gets 15, the project's default major.
#   --all means postgres:13 postgres:15 postgres:17 postgres:18.
#
# Environment:
#   ROLLSAFE_DEBIAN_MIRROR   use this mirror for every suite. Default: the
#       first that serves the suite among apt's source for that suite, the
#       base URL of apt's Debian archive source for any other suite (apt on a
#       bookworm machine only lists bookworm; the same mirror serves the
#       others), http://deb.debian.org/debian, http://archive.debian.org/debian.
#   ROLLSAFE_DEBIAN_SECURITY_MIRROR  mirror of the security suites (which
#       carry the newest PostgreSQL minors of stable suites); `none` builds
#       from the suite alone. Default: apt's, else
#       http://deb.debian.org/debian-security.
#   ROLLSAFE_DEBIAN_KEYRING  keyring that verifies the suite's Release file.
#       Default: /usr/share/keyrings/debian-archive-keyring.gpg (package
#       debian-archive-keyring; bookworm's version has the bullseye, bookworm
#       and trixie keys, and sid is signed with the current automatic key).
#       The build never proceeds with an unverified suite.
#
# Exit status: 0 every image present/pulled/built; 3 no Docker engine answers
# (the caller decides whether tests fall back to local binaries); other
# non-zero values are failures (with several images: 1 when any failed; the
# others are still built). Building needs root (~1 min, ~500 MB per image).
set -euo pipefail

ALL_IMAGES=(postgres:13 postgres:15 postgres:17 postgres:18)
DEFAULT_MAJOR=15
DEFAULT_MIRRORS=(http://deb.debian.org/debian http://archive.debian.org/debian)
DEFAULT_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
DEFAULT_SECURITY_MIRROR=http://deb.debian.org/debian-security
# Codenames (and their aliases) of the Debian archive, to recognise apt's
# source for it among other repositories; -security lives elsewhere.
ARCHIVE_SUITES='buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable'
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENTRYPOINT_SRC="$SCRIPT_DIR/postgres-image/docker-entrypoint.sh"

say() { printf '[build-postgres-image] %s\n' "$*"; }
die() { printf '[build-postgres-image] error: %s\n' "$*" >&2; exit 1; }

# The Debian suite that packages postgresql-<major>.
suite_of_major() {
	case "$1" in
	13) echo bullseye ;;
	15) echo bookworm ;;
	17) echo trixie ;;
	18) echo sid ;;
	*) return 1 ;;
	esac
}

# postgres:17 -> 17; postgres:17.2-bookworm -> 17; a tag without a leading
# number -> the default major.
major_of_image() {
	local tag="${1##*/}"
	case "$tag" in
	*:*) tag="${tag##*:}" ;;
	*) tag="" ;;
	esac
	if [[ "$tag" =~ ^([0-9]+) ]]; then
		echo "${BASH_REMATCH[1]}"
	else
		echo "$DEFAULT_MAJOR"
	fi
}

# Print the URIs of enabled `deb` sources whose suite matches the extended
# regex $1 (one-line *.list and deb822 *.sources formats), in file order.
apt_uris() {
	local re="^($1)\$" f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v re="$re" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) ~ re) print $i
			}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk -v re="$re" '
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
					else if (key == "suites") suites = val
					else if (key == "enabled") enabled = tolower(val)
				}
				if (enabled == "no" || types !~ / deb /) next
				n = split(suites, s, /[ \t]+/)
				for (k = 1; k <= n; k++) if (s[k] ~ re) { split(uris, u, /[ \t]+/); print u[1]; next }
			}' "$f"
	done
}

# Mirrors to try for suite $1, best first, without duplicates.
mirror_candidates() {
	if [ -n "${ROLLSAFE_DEBIAN_MIRROR:-}" ]; then
		echo "$ROLLSAFE_DEBIAN_MIRROR"
		return
	fi
	{
		apt_uris "$1"
		apt_uris "($ARCHIVE_SUITES)(-updates|-backports|-proposed-updates)?"
		printf '%s\n' "${DEFAULT_MIRRORS[@]}"
	} | sed 's:/*$::' | awk 'NF && !seen[$0]++'
}

# Download URL $1 to file $2 (quietly); fails when not served.
fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --max-time 60 -o "$2" "$1" 2>/dev/null
	elif command -v wget >/dev/null 2>&1; then
		wget -q -T 60 -O "$2" "$1"
	else
		/usr/lib/apt/apt-helper download-file "$1" "$2" >/dev/null 2>&1
	fi
}

# Security mirrors to try, best first: apt's, then the default.
security_mirror_candidates() {
	if [ -n "${ROLLSAFE_DEBIAN_SECURITY_MIRROR:-}" ]; then
		echo "$ROLLSAFE_DEBIAN_SECURITY_MIRROR"
		return
	fi
	{
		apt_uris "($ARCHIVE_SUITES)/updates|($ARCHIVE_SUITES)-security"
		echo "$DEFAULT_SECURITY_MIRROR"
	} | sed 's:/*$::' | awk 'NF && !seen[$0]++'
}

# Set PICKED to the first mirror read from stdin that serves suite $1 (its
# InRelease, or Release + Release.gpg on older archives), or to "" when none
# does. Dies when that mirror's Release file is not signed by a key in
# keyring $2: the build never proceeds from an unverified suite, and a suite
# signed by a key the keyring lacks (newer than the keyring package) fails
# here with the reason instead of deep inside mmdebstrap.
pick_mirror() {
	local suite="$1" keyring="$2" m gpg_out release=()
	PICKED=""
	while read -r m; do
		rm -f "$TMP/InRelease" "$TMP/Release" "$TMP/Release.gpg"
		if fetch "$m/dists/$suite/InRelease" "$TMP/InRelease"; then
			release=("$TMP/InRelease")
		elif fetch "$m/dists/$suite/Release.gpg" "$TMP/Release.gpg" \
			&& fetch "$m/dists/$suite/Release" "$TMP/Release"; then
			release=("$TMP/Release.gpg" "$TMP/Release")
		else
			say "mirror $m does not serve $suite"
			continue
		fi
		if ! gpg_out="$(gpgv --keyring "$keyring" "${release[@]}" 2>&1)"; then
			die "the Release file of Debian $suite at $m is not signed by a key in $keyring ($(printf '%s' "$gpg_out" | grep -m1 -iE 'no public key|bad signature|can.t check|using' || echo 'gpgv failed')); a newer debian-archive-keyring (e.g. from bookworm-backports or the suite itself) has the newer archive keys - install it or set ROLLSAFE_DEBIAN_KEYRING; the image is not built from an unverified suite"
		fi
		say "using $m for $suite (Release file verified: $(printf '%s' "$gpg_out" | sed -n 's/.*Good signature from "\(.*\)".*/\1/p' | head -n 1))"
		PICKED="$m"
		return 0
	done
}

# Build image $1 (major $2) from Debian packages; must run as root.
build_from_debian() {
	local image="$1" major="$2" suite keyring
	suite="$(suite_of_major "$major")" \
		|| die "no Debian suite known for PostgreSQL $major (this script builds 13 from bullseye, 15 from bookworm, 17 from trixie, 18 from sid); pull an official image instead (docker pull $image) or install the binaries (apt-get install postgresql-$major) and use --postgres local"
	say "building $image from Debian $suite packages (postgresql-$major)"

	[ "$(id -u)" = 0 ] || die "building the image needs root (mmdebstrap); re-run as root"
	[ -r "$ENTRYPOINT_SRC" ] || die "entrypoint $ENTRYPOINT_SRC not found"
	if ! command -v mmdebstrap >/dev/null 2>&1; then
		say "installing mmdebstrap with apt-get"
		apt-get update
		DEBIAN_FRONTEND=noninteractive apt-get install -y mmdebstrap
	fi

	TMP="$(mktemp -d "${TMPDIR:-/tmp}/rollsafe-pgimage.XXXXXX")"
	trap 'rm -rf "$TMP"' EXIT

	keyring="${ROLLSAFE_DEBIAN_KEYRING:-$DEFAULT_KEYRING}"
	[ -r "$keyring" ] || die "keyring $keyring not found; install debian-archive-keyring (apt-get install debian-archive-keyring) or set ROLLSAFE_DEBIAN_KEYRING"

	pick_mirror "$suite" "$keyring" < <(mirror_candidates "$suite")
	[ -n "$PICKED" ] || die "no mirror serves Debian $suite (tried: $(mirror_candidates "$suite" | tr '\n' ' ')); set ROLLSAFE_DEBIAN_MIRROR to one that does"
	local sources=("deb [signed-by=$keyring] $PICKED $suite main")

	# The security suite carries the newest PostgreSQL minor of a stable
	# suite (bullseye main: 13.16, bullseye-security: 13.23); sid has none.
	if [ "$suite" != sid ] && [ "${ROLLSAFE_DEBIAN_SECURITY_MIRROR:-}" != none ]; then
		pick_mirror "$suite-security" "$keyring" < <(security_mirror_candidates)
		if [ -n "$PICKED" ]; then
			sources+=("deb [signed-by=$keyring] $PICKED $suite-security main")
		else
			say "no mirror serves $suite-security; building from $suite alone (an older PostgreSQL minor)"
		fi
	fi

	cp "$ENTRYPOINT_SRC" "$TMP/docker-entrypoint.sh"
	local rootfs_tar="$TMP/rootfs.tar"
	say "creating root filesystem tarball with mmdebstrap (minbase + postgresql-$major)"
	# Expired Release files: archived and snapshot mirrors serve Release files
	# past their Valid-Until, so apt's expiry check is off (the signature
	# check stays on). Customize hooks run on the finished tree ("$1" is its
	# root): drop the cluster the Debian package creates (the entrypoint runs
	# initdb itself) and install the entrypoint. ($1 is expanded by the hook
	# shell, not here.)
	# shellcheck disable=SC2016
	mmdebstrap \
		--variant=minbase \
		--include="postgresql-$major" \
		--aptopt='Acquire::Check-Valid-Until "false"' \
		--customize-hook="rm -rf \"\$1/etc/postgresql/$major/main\" \"\$1/var/lib/postgresql/$major/main\"" \
		--customize-hook='mkdir -p "$1/docker-entrypoint-initdb.d" "$1/usr/local/bin"' \
		--customize-hook="install -m 0755 \"$TMP/docker-entrypoint.sh\" \"\$1/usr/local/bin/docker-entrypoint.sh\"" \
		"$suite" "$rootfs_tar" "${sources[@]}" \
		|| die "mmdebstrap failed for Debian $suite (does $suite still package postgresql-$major? see the output above)"

	say "checking the tarball contains an executable entrypoint and postgres $major"
	tar -tvf "$rootfs_tar" ./usr/local/bin/docker-entrypoint.sh | grep '^-rwxr-xr-x' >/dev/null \
		|| die "entrypoint missing or not executable in $rootfs_tar"
	tar -tf "$rootfs_tar" "./usr/lib/postgresql/$major/bin/postgres" >/dev/null 2>&1 \
		|| die "/usr/lib/postgresql/$major/bin/postgres missing in $rootfs_tar"

	say "importing the tarball into Docker as $image"
	docker import \
		--change "ENV PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		--change "ENV PGDATA=/var/lib/postgresql/data" \
		--change "ENV LANG=C.UTF-8" \
		--change "ENV PG_MAJOR=$major" \
		--change "EXPOSE 5432" \
		--change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
		--change 'CMD ["postgres"]' \
		--message "rollsafe: postgresql-$major from Debian $suite (ci/build-postgres-image.sh)" \
		- "$image" <"$rootfs_tar" >/dev/null
	rm -rf "$TMP"
}

# Present -> pulled -> built, for one image.
ensure_image() {
	local image="$1" major
	major="$(major_of_image "$image")"
	say "looking for image $image locally"
	if docker image inspect "$image" >/dev/null 2>&1; then
		say "image $image present"
		return 0
	fi
	say "trying to pull $image (60 s timeout)"
	if timeout 60 docker pull "$image"; then
		say "pulled $image"
		return 0
	fi
	say "pull failed"
	local started=$SECONDS
	build_from_debian "$image" "$major"
	say "image $image built in $((SECONDS - started)) s: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$image")"
}

images=()
for arg in "$@"; do
	case "$arg" in
	--all) images+=("${ALL_IMAGES[@]}") ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	-*) die "unknown option $arg (usage: $0 [IMAGE...] | --all)" ;;
	*) images+=("$arg") ;;
	esac
done
[ "${#images[@]}" -gt 0 ] || images=("${ROLLSAFE_POSTGRES_IMAGE:-postgres:15}")

say "checking that a Docker engine answers"
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	printf '[build-postgres-image] no Docker engine answers (docker info failed); image(s) %s not prepared\n' "${images[*]}" >&2
	exit 3
fi

if [ "${#images[@]}" -eq 1 ]; then
	ensure_image "${images[0]}"
	exit 0
fi

# Several images: each in its own process (its own temp dir and traps), one
# failure does not stop the others.
failed=()
for image in "${images[@]}"; do
	if ! "$BASH" "${BASH_SOURCE[0]}" "$image"; then
		failed+=("$image")
	fi
done
if [ "${#failed[@]}" -gt 0 ]; then
	die "not prepared: ${failed[*]} (see above)"
fi
say "all present: ${images[*]}"
