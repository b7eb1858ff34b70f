# The rollsafe image for users with a registry: the same content that
# ci/build-image.sh builds from Debian packages without one (read its header
# for the layout), built here from the official images:
#   docker build -t rollsafe .
#   docker run --rm -v "$PWD:/project" -w /project rollsafe verify
# The official postgres images of one Debian release (trixie) share its
# libraries, so each major's server binaries are copied next to each other
# and one apt-get brings what they link; the last check fails the build if
# any binary would not load.
ARG DEBIAN=trixie

FROM rust:1-${DEBIAN} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked && strip target/release/rollsafe

FROM postgres:13-${DEBIAN} AS pg13
FROM postgres:15-${DEBIAN} AS pg15
FROM postgres:17-${DEBIAN} AS pg17
FROM postgres:18-${DEBIAN} AS pg18

FROM debian:${DEBIAN}-slim
# What the servers (and rollsafe) link beyond the slim base, from the same
# release; the loop below proves the list complete.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates tzdata libnss-wrapper \
      libssl3t64 libgssapi-krb5-2 libicu76 libldap2 liblz4-1 libzstd1 zlib1g \
      libxml2 libxslt1.1 libpam0g libnuma1 liburing2 libxxhash0 libpq5 \
 && rm -rf /var/lib/apt/lists/*

# initdb, postgres and pg_dump of each major in Debian's layout (where the
# local backend looks: /usr/lib/postgresql/M/bin), their modules without
# the optional LLVM JIT, and their share directory without man pages.
COPY --from=pg13 /usr/lib/postgresql/13 /usr/lib/postgresql/13
COPY --from=pg13 /usr/share/postgresql/13 /usr/share/postgresql/13
COPY --from=pg15 /usr/lib/postgresql/15 /usr/lib/postgresql/15
COPY --from=pg15 /usr/share/postgresql/15 /usr/share/postgresql/15
COPY --from=pg17 /usr/lib/postgresql/17 /usr/lib/postgresql/17
COPY --from=pg17 /usr/share/postgresql/17 /usr/share/postgresql/17
COPY --from=pg18 /usr/lib/postgresql/18 /usr/lib/postgresql/18
COPY --from=pg18 /usr/share/postgresql/18 /usr/share/postgresql/18
COPY --from=build /src/target/release/rollsafe /usr/local/bin/rollsafe

RUN set -eu; \
    for m in 13 15 17 18; do \
      find "/usr/lib/postgresql/$m/bin" -mindepth 1 \
        ! -name initdb ! -name postgres ! -name pg_dump -exec rm -rf {} +; \
      rm -rf "/usr/lib/postgresql/$m/lib/bitcode" "/usr/lib/postgresql/$m/lib/llvmjit"* \
        "/usr/share/postgresql/$m/man"; \
    done; \
    missing=$(find /usr/local/bin /usr/lib/postgresql -type f \( -perm -u+x -o -name '*.so' \) \
      -exec ldd {} + 2>/dev/null | grep 'not found' | sort -u || true); \
    if [ -n "$missing" ]; then echo "libraries missing: $missing" >&2; exit 1; fi; \
    for m in 13 15 17 18; do "/usr/lib/postgresql/$m/bin/postgres" --version; done; \
    groupadd -g 1001 rollsafe; useradd -u 1001 -g 1001 -m -d /home/rollsafe rollsafe; \
    groupadd -g 999 postgres 2>/dev/null || true; \
    useradd -u 999 -g 999 -d /var/lib/postgresql -s /bin/sh postgres 2>/dev/null || true; \
    install -d -o 1001 -g 1001 /project; \
    printf '%s\n' '#!/bin/sh' \
      '# initdb refuses a uid without a passwd entry (docker run --user UID): nss_wrapper gives it one.' \
      'if ! id -un >/dev/null 2>&1; then' \
      '  NSS_WRAPPER_PASSWD="$(mktemp)"; NSS_WRAPPER_GROUP="$(mktemp)"' \
      '  printf "rollsafe:x:%s:%s:rollsafe:%s:/bin/sh\n" "$(id -u)" "$(id -g)" "${HOME:-/tmp}" >"$NSS_WRAPPER_PASSWD"' \
      '  cat /etc/group >"$NSS_WRAPPER_GROUP"; printf "rollsafe:x:%s:\n" "$(id -g)" >>"$NSS_WRAPPER_GROUP"' \
      '  LD_PRELOAD=libnss_wrapper.so; export NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LD_PRELOAD' \
      'fi' \
      'exec rollsafe "$@"' >/usr/local/bin/rollsafe-entrypoint; \
    chmod 0755 /usr/local/bin/rollsafe-entrypoint

ENV LANG=C.UTF-8 \
    HOME=/home/rollsafe \
    ROLLSAFE_POSTGRES=local \
    ROLLSAFE_PG_BINDIR=/usr/lib/postgresql/15/bin
USER 1001:1001
WORKDIR /project
ENTRYPOINT ["rollsafe-entrypoint"]
CMD ["--help"]
