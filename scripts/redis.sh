#!/usr/bin/env bash
# redis.sh start DIR | stop DIR | install — a throwaway redis-server on a free loopback port, no
# persistence. start prints "127.0.0.1:PORT"; stop kills only the server start started.
set -euo pipefail
cmd=${1:?usage: redis.sh start|stop DIR}
dir=${2:?usage: redis.sh start|stop DIR}
mkdir -p "$dir"

need_redis() {
  command -v redis-server >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "redis.sh: installing redis-server with apt-get" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) >&2
    command -v redis-server >/dev/null && return 0
  fi
  echo "redis.sh: redis-server is missing; install it (Debian: apt-get install redis-server)" >&2
  exit 1
}

case $cmd in
install)
  need_redis
  ;;
start)
  need_redis
  for _ in $(seq 20); do
    port=$(( 20000 + RANDOM % 20000 ))
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && continue   # taken
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
      --dir "$dir" --logfile "$dir/redis-$port.log" --daemonize no >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do
      if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
        echo "$pid" > "$dir/redis.pid"
        echo "127.0.0.1:$port"
        exit 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
  done
  echo "redis.sh: could not start redis-server (see $dir/redis-*.log)" >&2
  exit 1
  ;;
stop)
  [ -f "$dir/redis.pid" ] || exit 0
  pid=$(cat "$dir/redis.pid")
  if [ "$(readlink "/proc/$pid/exe" 2>/dev/null | xargs -r basename)" = redis-server ] || \
     [ "$(readlink "/proc/$pid/exe" 2>/dev/null | xargs -r basename)" = redis-check-rdb ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$dir/redis.pid"
  ;;
*) echo "usage: redis.sh start|stop DIR" >&2; exit 2 ;;
esac
