#!/usr/bin/env bash
# Install PostgreSQL 15 and pgvector for the Postgres conformance tests (Debian bookworm, as root).
#
# bookworm packages postgresql-15 and postgresql-server-dev-15 but not pgvector, so pgvector is
# built from Debian trixie's *source* package, fetched with `apt-get source` through a private
# sources list in a temporary directory: the system's own sources and package lists stay untouched.
# Idempotent: every step is skipped when what it installs is already there.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
PG=15
PG_CONFIG=/usr/lib/postgresql/$PG/bin/pg_config
EXT_DIR=/usr/share/postgresql/$PG/extension

need=()
[ -x /usr/lib/postgresql/$PG/bin/initdb ] || need+=("postgresql-$PG")
[ -f /usr/include/postgresql/$PG/server/postgres.h ] || need+=("postgresql-server-dev-$PG")
command -v make >/dev/null && command -v gcc >/dev/null || need+=(build-essential)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "install-postgres: apt-get install ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -f "$EXT_DIR/vector.control" ]; then
  echo "install-postgres: pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$EXT_DIR/vector.control") already installed"
  exit 0
fi

# The machine's usual Debian mirror, read from its own sources (deb822 or one-line format).
mirror=$(grep -hoE '(URIs:[[:space:]]*|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
  /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
  | grep -oE 'https?://[^[:space:]]+' | grep -v security | head -n1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

work=$(mktemp -d)
chmod 755 "$work"  # apt's _apt user downloads into it
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/etc"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" >"$work/etc/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$work/etc/sources.list"
  -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=root"
)
echo "install-postgres: fetching pgvector source from $mirror trixie"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source -qq --download-only pgvector >/dev/null)
(cd "$work" && dpkg-source -x ./pgvector_*.dsc src >/dev/null)
echo "install-postgres: building pgvector"
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" >/dev/null
make -s -C "$work/src" PG_CONFIG="$PG_CONFIG" install >/dev/null
echo "install-postgres: pgvector installed into $EXT_DIR"
