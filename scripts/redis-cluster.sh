#!/usr/bin/env bash
# redis-cluster.sh start DIR | stop DIR — a throwaway 3-master Redis Cluster on free
# loopback ports, no persistence. start prints "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3";
# stop kills only the servers start started.
set -euo pipefail
cmd=${1:?usage: redis-cluster.sh start|stop DIR}
dir=${2:?usage: redis-cluster.sh start|stop DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"

free_port() {
  local p
  for _ in $(seq 50); do
    p=$(( 20000 + RANDOM % 20000 ))
    # the cluster bus listens on port + 10000 too
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && continue
    (exec 3<>/dev/tcp/127.0.0.1/$((p + 10000))) 2>/dev/null && continue
    echo "$p"; return 0
  done
  return 1
}

case $cmd in
start)
  command -v redis-server >/dev/null || "$here/redis.sh" install
  addrs=()
  : > "$dir/cluster.pids"
  for i in 1 2 3; do
    mkdir -p "$dir/n$i"
    started=
    for _ in $(seq 10); do
      port=$(free_port)
      case " ${addrs[*]:-} " in *":$port "*) continue ;; esac
      rm -f "$dir/n$i/nodes.conf"
      redis-server --bind 127.0.0.1 --port "$port" --cluster-enabled yes \
        --cluster-config-file "$dir/n$i/nodes.conf" --cluster-node-timeout 2000 \
        --save '' --appendonly no --dir "$dir/n$i" --logfile "$dir/n$i/redis.log" \
        --daemonize no >/dev/null 2>&1 &
      pid=$!
      for _ in $(seq 50); do
        redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG && { started=1; break; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if [ -n "$started" ]; then
        echo "$pid" >> "$dir/cluster.pids"
        addrs+=("127.0.0.1:$port")
        break
      fi
      kill "$pid" 2>/dev/null || true   # the port was taken after all: another one
    done
    [ -n "$started" ] || { echo "redis-cluster.sh: node $i did not start (see $dir/n$i/redis.log)" >&2; "$0" stop "$dir"; exit 1; }
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
    echo "redis-cluster.sh: cluster create failed:" >&2; cat "$dir/create.log" >&2; "$0" stop "$dir"; exit 1; }
  for _ in $(seq 100); do
    redis-cli -h 127.0.0.1 -p "${addrs[0]##*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
    sleep 0.1
  done
  (IFS=,; echo "${addrs[*]}")
  ;;
stop)
  [ -f "$dir/cluster.pids" ] || exit 0
  while read -r pid; do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null | xargs -r basename)
    case $exe in redis-server|redis-check-rdb) kill "$pid" 2>/dev/null || true ;; esac
  done < "$dir/cluster.pids"
  # a node writes nodes.conf and its log while it shuts down: wait for every one to be
  # gone, so that the caller can remove DIR
  while read -r pid; do
    for _ in $(seq 50); do readlink "/proc/$pid/exe" >/dev/null 2>&1 || break; sleep 0.1; done
  done < "$dir/cluster.pids"
  rm -f "$dir/cluster.pids"
  ;;
*) echo "usage: redis-cluster.sh start|stop DIR" >&2; exit 2 ;;
esac
