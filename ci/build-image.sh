#!/usr/bin/env bash
# Build the rollsafe container image, `rollsafe:<version>` and
# `rollsafe:latest`, from Debian packages and the local `postgres:<major>`
# images, with no registry: the same way ci/build-postgres-image.sh builds
# the server images (mmdebstrap + docker import). The `Dockerfile` at the
# repository root builds the same content from official images for users
# who have a registry.
#
# What the image holds:
#   /usr/local/bin/rollsafe              the binary (stripped copy)
#   /usr/local/bin/rollsafe-entrypoint   runs rollsafe; gives an unknown uid
#                                        (docker run --user) a passwd entry
#                                        through nss_wrapper, since initdb
#                                        refuses a uid without one
#   /usr/lib/postgresql/M/bin            initdb, postgres, pg_dump, for
#                                        M = 13, 15, 17, 18 (the local
#                                        backend's usual place: --postgres
#                                        local and --postgres-version M work
#                                        as on a Debian machine)
#   /usr/lib/postgresql/M/lib            the server's modules (contrib
#                                        extensions), without the LLVM JIT
#   /usr/share/postgresql/M              catalog, timezone sets, extensions'
#                                        SQL (no man pages)
#   /usr/lib/rollsafe-compat             shared libraries those binaries
#                                        need that the base suite lacks
#                                        (distinct sonames such as
#                                        libicuuc.so.67, libssl.so.1.1),
#                                        taken from each major's own image,
#                                        on the loader path via ld.so.conf.d
# on a Debian `essential` root of the newest suite (sid by default: the
# newest glibc, which every older major's binaries also run on) with
# ca-certificates, tzdata and libnss-wrapper. It runs as the non-root user
# `rollsafe` (uid 1001, the uid of GitHub's hosted runner user, so files it
# writes in a mounted checkout belong to the runner), in /project, with
# ROLLSAFE_POSTGRES=local and ROLLSAFE_PG_BINDIR at PostgreSQL 15 (the
# project's default major; --postgres-version picks another). Contract:
#     docker run --rm -v "$PWD:/project" -w /project rollsafe:latest verify
# rehearses the project in the current directory and exits as verify does.
#
# Usage: ci/build-image.sh [--binary PATH] [--tag NAME] [--majors "13 15 17 18"] [--refresh-base]
#   --binary PATH  package this rollsafe binary (e.g. target/debug/rollsafe,
#                  which ci/test-install.sh uses so the test run stays fast)
#                  instead of building `cargo build --release --locked`.
#   --tag NAME     image name without tag [default: rollsafe]; the image is
#                  tagged NAME:<version> (rollsafe --version) and NAME:latest.
#   --majors LIST  PostgreSQL majors to include [default: 13 15 17 18]; each
#                  comes from the local image postgres:<major>, built by
#                  ci/build-postgres-image.sh when it is missing.
#   --refresh-base make the base root anew with mmdebstrap (~3 min); by
#                  default the one kept as the local image
#                  rollsafe-image-base:<suite> is reused.
#
# Environment:
#   ROLLSAFE_IMAGE_SUITE     Debian suite of the base root [default: sid].
#   ROLLSAFE_DEBIAN_MIRROR   mirror for it [default: http://deb.debian.org/debian].
#   ROLLSAFE_DEBIAN_KEYRING  keyring that verifies the suite
#                            [default: /usr/share/keyrings/debian-archive-keyring.gpg].
#   CARGO_TARGET_DIR         where the release build lands [default: target].
#
# Exit status: 0 built (and every major's initdb and postgres ran inside
# it); 3 no Docker engine answers; other non-zero values are failures.
# Needs root (mmdebstrap, chroot). Prints the image's size at the end.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUITE="${ROLLSAFE_IMAGE_SUITE:-sid}"
MIRROR="${ROLLSAFE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEYRING="${ROLLSAFE_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
COMPAT=/usr/lib/rollsafe-compat
DEFAULT_MAJOR=15
RUN_UID=1001
BASE_IMAGE="rollsafe-image-base:${ROLLSAFE_IMAGE_SUITE:-sid}"

say() { printf '[build-image %3ds] %s\n' "$SECONDS" "$*"; }
die() { printf '[build-image] error: %s\n' "$*" >&2; exit 1; }

binary=""
name=rollsafe
majors=(13 15 17 18)
refresh_base=false
while [ "$#" -gt 0 ]; do
	case "$1" in
	--binary) binary="${2:?--binary needs a path}"; shift 2 ;;
	--tag) name="${2:?--tag needs a name}"; shift 2 ;;
	--majors) read -r -a majors <<<"${2:?--majors needs a list}"; shift 2 ;;
	--refresh-base) refresh_base=true; shift ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument $1 (usage: $0 [--binary PATH] [--tag NAME] [--majors \"13 15 17 18\"])" ;;
	esac
done

say "checking that a Docker engine answers"
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	printf '[build-image] no Docker engine answers (docker info failed); the image is not built\n' >&2
	exit 3
fi
[ "$(id -u)" = 0 ] || die "building the image needs root (mmdebstrap, chroot); re-run as root"
[ -r "$KEYRING" ] || die "keyring $KEYRING not found; install debian-archive-keyring or set ROLLSAFE_DEBIAN_KEYRING"
if ! command -v mmdebstrap >/dev/null 2>&1; then
	say "installing mmdebstrap with apt-get"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap
fi

if [ -z "$binary" ]; then
	say "building the release binary (cargo build --release --locked)"
	(cd "$REPO" && cargo build --release --locked)
	binary="${CARGO_TARGET_DIR:-$REPO/target}/release/rollsafe"
fi
[ -x "$binary" ] || die "$binary is not an executable rollsafe binary; build it (cargo build --release) or pass --binary PATH"
version="$("$binary" --version | awk '{print $2}')"
[ -n "$version" ] || die "$binary --version printed no version"
say "packaging $binary (rollsafe $version) with PostgreSQL ${majors[*]} on Debian $SUITE"

for major in "${majors[@]}"; do
	if ! docker image inspect "postgres:$major" >/dev/null 2>&1; then
		say "image postgres:$major missing: building it (ci/build-postgres-image.sh)"
		bash "$REPO/ci/build-postgres-image.sh" "postgres:$major" \
			|| die "postgres:$major could not be prepared; its binaries are copied from that image"
	fi
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/rollsafe-image.XXXXXX")"
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT
ROOT="$TMP/root"

# Unpacks image $1's filesystem into directory $2.
unpack_image() {
	local cid rc=0
	cid="$(docker create "$1" true)"
	docker export "$cid" | tar -x -C "$2" || rc=$?
	docker rm -f "$cid" >/dev/null
	[ "$rc" = 0 ] || die "unpacking $1 failed"
}

# The base root: Debian's Essential:yes set plus what rollsafe and the
# servers need from the base itself (CA certificates for sslmode=verify-*,
# the time zone database the servers read, nss_wrapper). Documentation,
# man pages and translations are never unpacked. mmdebstrap takes minutes,
# so the base is kept as the image $BASE_IMAGE and reused (--refresh-base
# makes it anew, e.g. for the suite's security updates).
if [ "$refresh_base" = true ] || ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
	say "creating the base root with mmdebstrap (Debian $SUITE, variant essential) as $BASE_IMAGE"
	mmdebstrap \
		--variant=essential \
		--include=ca-certificates,tzdata,libnss-wrapper \
		--aptopt='Acquire::Check-Valid-Until "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		"$SUITE" "$ROOT" "deb [signed-by=$KEYRING] $MIRROR $SUITE main" \
		|| die "mmdebstrap failed for Debian $SUITE at $MIRROR (see above); set ROLLSAFE_DEBIAN_MIRROR or ROLLSAFE_IMAGE_SUITE"
	rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* "$ROOT"/var/cache/debconf/*-old
	tar -C "$ROOT" -c . | docker import \
		--message "rollsafe image base: Debian $SUITE essential + ca-certificates tzdata libnss-wrapper (ci/build-image.sh)" \
		- "$BASE_IMAGE" >/dev/null
else
	say "reusing the base root $BASE_IMAGE (--refresh-base makes it anew)"
	mkdir -p "$ROOT"
	unpack_image "$BASE_IMAGE" "$ROOT"
fi

# Each major's image, unpacked: its server binaries are copied from it,
# and it is where that major's missing libraries are looked up. Newest
# first, so a soname several images have comes from the newest (a newer
# library of the same soname serves older consumers).
sources=()
for major in $(printf '%s\n' "${majors[@]}" | sort -rn); do
	src="$TMP/src-$major"
	mkdir -p "$src"
	say "unpacking postgres:$major"
	unpack_image "postgres:$major" "$src"
	sources+=("$src")

	[ -x "$src/usr/lib/postgresql/$major/bin/postgres" ] \
		|| die "postgres:$major has no /usr/lib/postgresql/$major/bin/postgres (not a Debian-layout image)"
	mkdir -p "$ROOT/usr/lib/postgresql/$major/bin" "$ROOT/usr/share/postgresql"
	for prog in initdb postgres pg_dump; do
		cp -L "$src/usr/lib/postgresql/$major/bin/$prog" "$ROOT/usr/lib/postgresql/$major/bin/"
	done
	# The JIT (llvmjit.so and its bitcode) is optional: without it the
	# server runs with jit unavailable, and it would bring LLVM (~100 MB).
	cp -a "$src/usr/lib/postgresql/$major/lib" "$ROOT/usr/lib/postgresql/$major/"
	rm -rf "$ROOT/usr/lib/postgresql/$major/lib/bitcode" "$ROOT/usr/lib/postgresql/$major/lib/llvmjit"*
	cp -a "$src/usr/share/postgresql/$major" "$ROOT/usr/share/postgresql/"
	rm -rf "$ROOT/usr/share/postgresql/$major/man"
done
# The host is the last place to look (the binary's own libraries).
sources+=("/")

install -D -m 0755 "$binary" "$ROOT/usr/local/bin/rollsafe"
if command -v strip >/dev/null 2>&1; then
	strip "$ROOT/usr/local/bin/rollsafe"
else
	say "note: strip not found (apt-get install binutils); the binary is packaged with its symbols"
fi

# The sonames the image's loader cannot find for the files listed on
# stdin (paths inside the image), one per line.
missing_sonames() {
	local f
	chroot "$ROOT" /sbin/ldconfig
	while read -r f; do
		[ -n "$f" ] || continue
		head -c 4 "$ROOT$f" | grep -q 'ELF' || continue
		{ chroot "$ROOT" /usr/bin/ldd "$f" 2>/dev/null || true; } \
			| awk '$2 == "=>" && $3 == "not" { print $1 }'
	done | sort -u
}

# Copies the library with soname $1 from the first source root whose
# loader cache has it into the compat dir; fails when none has it.
copy_soname() {
	local soname="$1" src path
	for src in "${sources[@]}"; do
		path="$(chroot "$src" /sbin/ldconfig -p 2>/dev/null \
			| awk -v s="$soname" '$1 == s && /x86-64/ { print $NF; exit }')"
		if [ -n "$path" ] && [ -e "$src$path" ]; then
			cp -L "$src$path" "$ROOT$COMPAT/$soname"
			say "  $soname <- ${src#"$TMP"/}$path"
			return 0
		fi
	done
	return 1
}

# Each file is checked once: ldd lists a file's whole tree, except below a
# library that is not found, and each library copied in is checked in the
# next round.
say "resolving the shared libraries the base lacks into $COMPAT"
mkdir -p "$ROOT$COMPAT"
echo "$COMPAT" >"$ROOT/etc/ld.so.conf.d/rollsafe-compat.conf"
to_check="$(find "$ROOT/usr/local/bin" "$ROOT/usr/lib/postgresql" -type f \
	\( -perm -u+x -o -name '*.so' \) | sed "s:^$ROOT::")"
for round in 1 2 3 4 5 6; do
	missing="$(missing_sonames <<<"$to_check")"
	[ -n "$missing" ] || break
	[ "$round" -lt 6 ] || die "libraries still missing after $round rounds: $(echo "$missing" | tr '\n' ' ')"
	to_check=""
	for soname in $missing; do
		copy_soname "$soname" || die "no source has $soname (needed inside the image)"
		to_check+="$COMPAT/$soname"$'\n'
	done
done
chroot "$ROOT" /sbin/ldconfig

# The users: rollsafe runs as `rollsafe`; as root, the local backend hands
# the server to `postgres` (PostgreSQL refuses to run as root).
cat >>"$ROOT/etc/passwd" <<EOF
rollsafe:x:$RUN_UID:$RUN_UID:rollsafe:/home/rollsafe:/bin/sh
postgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh
EOF
cat >>"$ROOT/etc/group" <<EOF
rollsafe:x:$RUN_UID:
postgres:x:999:
EOF
install -d -o "$RUN_UID" -g "$RUN_UID" -m 0755 "$ROOT/home/rollsafe" "$ROOT/project"
install -d -o 999 -g 999 -m 0755 "$ROOT/var/lib/postgresql"
chmod 1777 "$ROOT/tmp"

cat >"$ROOT/usr/local/bin/rollsafe-entrypoint" <<'EOF'
#!/bin/sh
# Runs rollsafe. initdb refuses a uid without a passwd entry, and
# `docker run --user UID` (a CI runner's uid) has none: give it one
# through nss_wrapper, as the official postgres image does.
if ! id -un >/dev/null 2>&1; then
	NSS_WRAPPER_PASSWD="$(mktemp)"
	NSS_WRAPPER_GROUP="$(mktemp)"
	printf 'rollsafe:x:%s:%s:rollsafe:%s:/bin/sh\n' "$(id -u)" "$(id -g)" "${HOME:-/tmp}" >"$NSS_WRAPPER_PASSWD"
	cat /etc/group >"$NSS_WRAPPER_GROUP"
	printf 'rollsafe:x:%s:\n' "$(id -g)" >>"$NSS_WRAPPER_GROUP"
	LD_PRELOAD=libnss_wrapper.so
	export NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LD_PRELOAD
fi
exec rollsafe "$@"
EOF
chmod 0755 "$ROOT/usr/local/bin/rollsafe-entrypoint"

say "checking inside the root: each major's initdb and postgres run, as a non-root user"
for major in "${majors[@]}"; do
	bin="/usr/lib/postgresql/$major/bin"
	got="$(chroot --userspec=$RUN_UID:$RUN_UID "$ROOT" "$bin/postgres" --version)" \
		|| die "postgres $major does not run inside the image"
	case "$got" in
	*"(PostgreSQL) $major."*) ;;
	*) die "$bin/postgres --version says '$got', not PostgreSQL $major" ;;
	esac
	chroot --userspec=$RUN_UID:$RUN_UID "$ROOT" "$bin/initdb" --version >/dev/null \
		|| die "initdb $major does not run inside the image"
	chroot --userspec=$RUN_UID:$RUN_UID "$ROOT" "$bin/pg_dump" --version >/dev/null \
		|| die "pg_dump $major does not run inside the image"
	say "  $got"
done
chroot --userspec=$RUN_UID:$RUN_UID "$ROOT" /usr/local/bin/rollsafe --version >/dev/null \
	|| die "rollsafe does not run inside the image"

say "importing the root into Docker as $name:$version and $name:latest"
tar -C "$ROOT" -c . | docker import \
	--change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--change "ENV LANG=C.UTF-8" \
	--change "ENV HOME=/home/rollsafe" \
	--change "ENV ROLLSAFE_POSTGRES=local" \
	--change "ENV ROLLSAFE_PG_BINDIR=/usr/lib/postgresql/$DEFAULT_MAJOR/bin" \
	--change "LABEL org.opencontainers.image.title=rollsafe org.opencontainers.image.version=$version" \
	--change "LABEL org.opencontainers.image.description=\"rollsafe $version with PostgreSQL ${majors[*]} for --postgres local\"" \
	--change "USER $RUN_UID:$RUN_UID" \
	--change "WORKDIR /project" \
	--change 'ENTRYPOINT ["rollsafe-entrypoint"]' \
	--change 'CMD ["--help"]' \
	--message "rollsafe $version: PostgreSQL ${majors[*]} on Debian $SUITE (ci/build-image.sh)" \
	- "$name:$version" >/dev/null
docker tag "$name:$version" "$name:latest"
size="$(docker image inspect --format '{{.Size}}' "$name:$version")"
say "built $name:$version and $name:latest: $((size / 1000000)) MB ($size bytes)"
