#!/usr/bin/env bash
# postgres.sh start DIR | stop DIR | install — a throwaway PostgreSQL server on a free
# loopback port, its data and socket in DIR, tuned for tests (no fsync). start prints a
# DSN ("postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable"); stop stops only
# the server start started. The server refuses to run as root, so as root it runs as the
# unprivileged `postgres` user (which Debian's package creates), else as the caller.
set -euo pipefail
cmd=${1:?usage: postgres.sh start|stop|install DIR}

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  d=$(command -v pg_ctl 2>/dev/null) && { dirname "$d"; return 0; }
  return 1
}

need_postgres() {
  bindir >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "postgres.sh: installing postgresql with apt-get" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
    bindir >/dev/null && return 0
  fi
  echo "postgres.sh: the PostgreSQL server is missing; install it (Debian: apt-get install postgresql)" >&2
  exit 1
}

# as_owner CMD...: run CMD as the user who owns the server's files.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "$cmd" = install ]; then
  need_postgres
  exit 0
fi
dir=${2:?usage: postgres.sh start|stop DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd -P)

case $cmd in
start)
  need_postgres
  bin=$(bindir)
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { echo "postgres.sh: no 'postgres' user to run the server as" >&2; exit 1; }
    chown postgres: "$dir"
  fi
  cd "$dir"   # the server user may not be allowed into the caller's directory
  as_owner "$bin/initdb" --pgdata "$dir/data" --username postgres --auth trust \
    --encoding UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 || {
    echo "postgres.sh: initdb failed:" >&2; tail -20 "$dir/initdb.log" >&2; exit 1; }
  for _ in $(seq 20); do
    port=$(( 20000 + RANDOM % 20000 ))
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && continue   # taken
    if as_owner "$bin/pg_ctl" start --pgdata "$dir/data" --wait --timeout 30 \
      --log "$dir/postgres.log" --silent \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir \
          -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
          -c max_connections=300" >/dev/null 2>&1; then
      echo "$port" > "$dir/port"
      echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
      exit 0
    fi
  done
  echo "postgres.sh: could not start the server (see $dir/postgres.log)" >&2
  exit 1
  ;;
stop)
  [ -f "$dir/data/postmaster.pid" ] || exit 0
  bin=$(bindir)
  as_owner "$bin/pg_ctl" stop --pgdata "$dir/data" --mode fast --wait --silent >/dev/null 2>&1 || true
  ;;
*) echo "usage: postgres.sh start|stop|install DIR" >&2; exit 2 ;;
esac
