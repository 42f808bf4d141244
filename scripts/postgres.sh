#!/usr/bin/env bash
# Starts (and stops) a throwaway PostgreSQL server for Trove's tests and benchmarks: installs
# Debian's `postgresql` when it is missing, initialises a cluster in a new directory with
# `initdb` (as the `postgres` user when run as root: PostgreSQL refuses to run as root),
# starts it on a free loopback port with `pg_ctl`, and prints its connection URL on stdout.
#
#   scripts/postgres.sh start [--dir DIR] [--watch PID] [--fast]
#       DIR      where the cluster goes (created; default: a new directory under $TMPDIR or /tmp)
#       PID      stop the server and remove DIR once process PID has exited (the test binaries
#                pass their own pid, so the server never outlives them, even after a crash)
#       --fast   fsync=off, synchronous_commit=off: for tests only, never for measurements
#   scripts/postgres.sh stop DIR      stops the server of DIR (fast shutdown) and keeps DIR
#   scripts/postgres.sh restart DIR   restarts it on the same port
#   scripts/postgres.sh remove DIR    stops it (immediate shutdown) and removes DIR
#
# Authentication is `trust` on 127.0.0.1 only: the server is for this machine's tests. Messages
# go to stderr; stdout carries only the URL, so callers can read it with $(...).
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# How many ports to try before giving up (another process may take a port between the check
# and the server's bind).
PORT_TRY_COUNT_MAX=20
# How long pg_ctl waits for the server to accept connections.
START_WAIT_S=60

find_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
      echo "$dir"
      return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return 0
  fi
  return 1
}

ensure_installed() {
  if find_bindir >/dev/null; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and apt-get is missing: install PostgreSQL (initdb, pg_ctl) by hand"
  local sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  log "installing Debian's postgresql"
  $sudo_cmd apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq postgresql >&2 \
    || die "apt-get install postgresql failed"
  find_bindir >/dev/null || die "postgresql was installed but initdb/pg_ctl are not found under /usr/lib/postgresql/*/bin"
}

# Runs a PostgreSQL program as the user owning the cluster.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  local dir="" watch="" fast=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) dir="$2"; shift 2 ;;
      --watch) watch="$2"; shift 2 ;;
      --fast) fast=1; shift ;;
      *) die "unknown option $1" ;;
    esac
  done
  ensure_installed
  local bindir
  bindir=$(find_bindir)
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    die "running as root but there is no 'postgres' user to run the server as"
  fi
  if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/trove-postgres.XXXXXX")
  else
    mkdir -p "$dir"
  fi
  dir=$(cd "$dir" && pwd)
  [ -e "$dir/data" ] && die "$dir/data exists already"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir"
    # The server user must be able to reach the directory.
    chmod 755 "$dir"
    runuser -u postgres -- test -x "$dir" \
      || die "the postgres user cannot reach $dir: make its parent directories searchable (chmod o+x)"
  fi
  as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed in $dir"; }
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "max_connections = 300"
    echo "shared_buffers = 128MB"
    # Trove's transactions are serializable; give the predicate lock table room for many.
    echo "max_pred_locks_per_transaction = 256"
    if [ "$fast" -eq 1 ]; then
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null

  local try port=""
  for try in $(seq 1 "$PORT_TRY_COUNT_MAX"); do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    port_in_use "$port" && continue
    if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$START_WAIT_S" \
      -o "-p $port" start >"$dir/pg_ctl.log" 2>&1; then
      break
    fi
    if grep -q "could not bind\|Address already in use" "$dir/server.log" 2>/dev/null; then
      port=""
      continue
    fi
    tail -n 30 "$dir/server.log" >&2 2>/dev/null || true
    cat "$dir/pg_ctl.log" >&2
    die "pg_ctl could not start the server in $dir"
  done
  [ -n "$port" ] || die "no free port found in $PORT_TRY_COUNT_MAX tries"
  echo "$port" >"$dir/port"
  echo "$bindir" >"$dir/bindir"

  if [ -n "$watch" ]; then
    # A watchdog outside the caller's process group, with no inherited descriptors (a caller
    # reading our stdout must see it close when this script ends).
    setsid bash -c '
      while kill -0 "$1" 2>/dev/null; do sleep 1; done
      "$0" remove "$2"
    ' "$(readlink -f "$0")" "$watch" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  log "server of $dir listening on 127.0.0.1:$port (log: $dir/server.log)"
  echo "postgres://postgres@127.0.0.1:$port/postgres"
}

pg_ctl_of() {
  local dir="$1"; shift
  [ -f "$dir/bindir" ] || die "$dir is not a cluster made by this script"
  as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" "$@"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  start) start "$@" ;;
  stop)
    pg_ctl_of "${1:?usage: $0 stop DIR}" -m fast -w stop >&2 ;;
  restart)
    pg_ctl_of "${1:?usage: $0 restart DIR}" -l "$1/server.log" -m fast -w -t "$START_WAIT_S" restart >&2 ;;
  remove)
    dir="${1:?usage: $0 remove DIR}"
    if [ -f "$dir/data/postmaster.pid" ]; then
      pg_ctl_of "$dir" -m immediate -w stop >&2 || true
    fi
    rm -rf "$dir" ;;
  *)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
