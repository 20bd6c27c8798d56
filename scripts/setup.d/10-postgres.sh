#!/usr/bin/env bash
# PostgreSQL 15 + pgvector 0.8.0 for the suite: installs the Debian packages, builds pgvector (bookworm has no
# package for it) from the trixie source package, starts a local server (scripts/postgres.sh) and prints
# `export MINIHERMES_PG_DSN=...`. Idempotent: a second run only checks that the server is up.
# Progress goes to stderr; stdout carries only the export lines (scripts/test evals them).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

PG_MAJOR=15
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
PGVECTOR_VERSION=0.8.0
PGVECTOR_DEBIAN_VERSION=0.8.0-1
# sha256 of pgvector_0.8.0.orig.tar.gz as published in trixie's pgvector_0.8.0-1.dsc (checked against both).
PGVECTOR_ORIG_SHA256=867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0
CACHE=$ROOT/.cache/pgvector

log() { echo "setup.d/10-postgres: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else
    log "needs root for: $*"
    exit 1
  fi
}

install_packages() {
  local missing=()
  for pkg in postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-contrib make gcc; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

pgvector_installed() {
  local control
  control="$("$PG_CONFIG" --sharedir)/extension/vector.control"
  [ -f "$control" ] && grep -q "default_version = '$PGVECTOR_VERSION'" "$control" \
    && [ -f "$("$PG_CONFIG" --pkglibdir)/vector.so" ]
}

fetch_pgvector_source() {
  # A private apt configuration (own source list and package lists under .cache/) that knows only trixie's
  # sources, so the machine's apt state is left alone. The mirror is the one the machine already uses.
  local mirror apt_dir
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  apt_dir=$CACHE/apt
  mkdir -p "$apt_dir/lists/partial" "$CACHE/src"
  echo "deb-src $mirror trixie main" > "$apt_dir/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Sandbox::User=root" -qq)
  log "fetching the pgvector $PGVECTOR_DEBIAN_VERSION source package from $mirror trixie"
  apt-get "${opts[@]}" update >&2
  (cd "$CACHE/src" && apt-get "${opts[@]}" source --download-only "pgvector=$PGVECTOR_DEBIAN_VERSION" >&2)
}

verify_orig() {
  local tarball=$CACHE/src/pgvector_$PGVECTOR_VERSION.orig.tar.gz
  local got listed
  got=$(sha256sum "$tarball" | cut -d' ' -f1)
  listed=$(awk '/^Checksums-Sha256:/ {on=1; next} on && /orig.tar.gz/ {print $1; exit}' \
    "$CACHE/src/pgvector_$PGVECTOR_DEBIAN_VERSION.dsc")
  if [ "$got" != "$PGVECTOR_ORIG_SHA256" ] || [ "$listed" != "$PGVECTOR_ORIG_SHA256" ]; then
    log "sha256 mismatch for $tarball: got $got, .dsc lists $listed, expected $PGVECTOR_ORIG_SHA256"
    rm -f "$tarball"
    exit 1
  fi
}

build_pgvector() {
  local build=$CACHE/build/pgvector-$PGVECTOR_VERSION
  if [ ! -f "$build/vector.so" ]; then
    [ -f "$CACHE/src/pgvector_$PGVECTOR_VERSION.orig.tar.gz" ] || fetch_pgvector_source
    verify_orig
    rm -rf "$build"
    mkdir -p "$CACHE/build"
    tar -xzf "$CACHE/src/pgvector_$PGVECTOR_VERSION.orig.tar.gz" -C "$CACHE/build"
    log "building pgvector $PGVECTOR_VERSION"
    # with_llvm=no: no JIT bitcode (bookworm's server-dev package would need clang for it).
    make -s -C "$build" with_llvm=no PG_CONFIG="$PG_CONFIG" -j"$(nproc)" >&2
  fi
  as_root make -s -C "$build" with_llvm=no PG_CONFIG="$PG_CONFIG" install >&2
}

start=$(date +%s)
install_packages
pgvector_installed || build_pgvector
# postgres.sh prints the export line(s) on stdout.
bash "$ROOT/scripts/postgres.sh" start
log "ready in $(($(date +%s) - start)) s"
