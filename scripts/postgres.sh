#!/usr/bin/env bash
# Starts (and stops) a throwaway PostgreSQL server for Trove's tests and benchmarks: installs
# Debian's `postgresql` when it is missing, initialises a cluster in a new directory with
# `initdb` (as the `postgres` user when run as root: PostgreSQL refuses to run as root),
# starts it on a free loopback port with `pg_ctl`, and prints its connection URL on stdout.
#
#   scripts/postgres.sh start [--dir DIR] [--watch PID] [--fast]
#                             [--listen ADDR] [--port PORT] [--trust CIDR] [--netns NAME] [--db NAME]
#       DIR      where the cluster goes (created; default: a new directory under $TMPDIR or /tmp)
#       PID      stop the server and remove DIR once process PID has exited (the test binaries
#                pass their own pid, so the server never outlives them, even after a crash)
#       --fast   fsync=off, synchronous_commit=off: for tests only, never for measurements
#       ADDR     the address to listen on (default 127.0.0.1); PORT a fixed port (default: a
#                free one); CIDR also trusts clients from this network (e.g. 10.1.2.0/24)
#       NAME     --netns: run the server inside this network namespace (`ip netns exec`; the
#                multi-host tests); --db: create this database and name it in the URL
#   scripts/postgres.sh stop DIR      stops the server of DIR (fast shutdown) and keeps DIR
#   scripts/postgres.sh restart DIR   restarts it on the same port
#   scripts/postgres.sh remove DIR    stops it (immediate shutdown) and removes DIR
#
# Authentication is `trust` on 127.0.0.1 (and --trust CIDR) only: the server is for tests. Messages
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

# Runs a PostgreSQL program as the owner, inside the cluster's network namespace if it has one
# (recorded in DIR/netns by `start --netns`).
in_netns_as_owner() {
  local dir="$1"; shift
  if [ -f "$dir/netns" ]; then
    ip netns exec "$(cat "$dir/netns")" runuser -u postgres -- "$@"
  else
    as_owner "$@"
  fi
}

port_in_use() {
  local addr="$1" port="$2" netns="$3"
  if [ -n "$netns" ]; then
    ip netns exec "$netns" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$addr" "$port" 2>/dev/null
  else
    (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null
  fi
}

start() {
  local dir="" watch="" fast=0 listen="127.0.0.1" fixed_port="" trust="" netns="" db=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) dir="$2"; shift 2 ;;
      --watch) watch="$2"; shift 2 ;;
      --fast) fast=1; shift ;;
      --listen) listen="$2"; shift 2 ;;
      --port) fixed_port="$2"; shift 2 ;;
      --trust) trust="$2"; shift 2 ;;
      --netns) netns="$2"; shift 2 ;;
      --db) db="$2"; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  if [ -n "$netns" ]; then
    [ "$(id -u)" -eq 0 ] || die "--netns needs root"
    ip netns exec "$netns" true 2>/dev/null || die "network namespace $netns does not exist"
  fi
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
  if [ -n "$netns" ]; then
    echo "$netns" >"$dir/netns"
  fi
  if [ -n "$trust" ]; then
    echo "host all all $trust trust" | as_owner tee -a "$dir/data/pg_hba.conf" >/dev/null
  fi
  {
    echo "listen_addresses = '$listen'"
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
  local tries="$PORT_TRY_COUNT_MAX"
  [ -n "$fixed_port" ] && tries=1
  for try in $(seq 1 "$tries"); do
    port=${fixed_port:-$((20000 + (RANDOM * 32768 + RANDOM) % 40000))}
    if [ -z "$fixed_port" ] && port_in_use "$listen" "$port" "$netns"; then
      port=""
      continue
    fi
    if in_netns_as_owner "$dir" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$START_WAIT_S" \
      -o "-p $port" start >"$dir/pg_ctl.log" 2>&1; then
      break
    fi
    if [ -z "$fixed_port" ] && grep -q "could not bind\|Address already in use" "$dir/server.log" 2>/dev/null; then
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
  if [ -n "$db" ]; then
    # Over the Unix socket in DIR: no network needed, whatever the namespace.
    as_owner "$bindir/createdb" -h "$dir" -p "$port" -U postgres "$db" >&2 \
      || die "createdb $db failed (server log: $dir/server.log)"
  fi
  local host="$listen"
  case "$host" in '*'|0.0.0.0|'') host=127.0.0.1 ;; esac
  log "server of $dir listening on $host:$port${netns:+ in network namespace $netns} (log: $dir/server.log)"
  echo "postgres://postgres@$host:$port/${db:-postgres}"
}

pg_ctl_of() {
  local dir="$1"; shift
  [ -f "$dir/bindir" ] || die "$dir is not a cluster made by this script"
  if [ "$1" = stop ]; then
    # Stopping only signals the server: it works even once the namespace is gone.
    as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" "$@"
  else
    in_netns_as_owner "$dir" "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" "$@"
  fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  start) start "$@" ;;
  stop)
    pg_ctl_of "${1:?usage: $0 stop DIR}" stop -m fast -w >&2 ;;
  restart)
    pg_ctl_of "${1:?usage: $0 restart DIR}" -l "$1/server.log" -m fast -w -t "$START_WAIT_S" restart >&2 ;;
  remove)
    dir="${1:?usage: $0 remove DIR}"
    if [ -f "$dir/data/postmaster.pid" ]; then
      pg_ctl_of "$dir" stop -m immediate -w >&2 || true
    fi
    rm -rf "$dir" ;;
  *)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
