#!/usr/bin/env bash
# hostile-bodies.sh [BIN [N]] — what a replica pays for the nested bodies of issue 20
# (docs/reliability.md): one built replica BIN (default bin/warmpool; fake driver, SQLite
# store) on the redis-server of REDIS_ADDR, then for each body, sent N times (default 1):
# its size, the answer, the replica's RSS before, its peak RSS (VmHWM, reset before the
# body) and the CPU time of the replica per request (every thread's schedstat).
#   scripts/with-redis.sh scripts/hostile-bodies.sh bin/warmpool 20
set -euo pipefail
bin=${1:-bin/warmpool}
n=${2:-1}
: "${REDIS_ADDR:?run it under scripts/with-redis.sh}"
dir=$(mktemp -d "${TMPDIR:-/tmp}/hostile-bodies.XXXXXX")
pid=
trap '[ -z "$pid" ] || { kill "$pid"; wait "$pid"; } 2>/dev/null; rm -rf "$dir"' EXIT

# start_replica: a fresh replica (its own store and Redis prefix) in pid, at url.
start_replica() {
  local port
  for _ in $(seq 20); do
    port=$(( 20000 + RANDOM % 20000 ))
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || break   # free
  done
  url=http://127.0.0.1:$port
  rm -f "$dir"/store.db*
  "$bin" serve --listen "127.0.0.1:$port" --redis "redis://$REDIS_ADDR/0" --store "$dir/store.db" \
    --prefix "hb$port:" --driver fake --log-level warn >"$dir/out.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -fs "$url/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/out.log" >&2
  exit 1
}

stop_replica() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

kb() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$pid/status"; }
# cpu_ms: milliseconds of CPU (user and system) the replica has used, its exited
# threads included.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) * 1000 / hz }' "/proc/$pid/stat"; }
repeat() { local i; for ((i = 0; i < $2; i++)); do printf '%s' "$1"; done; }

key=$(repeat k 30)
# 9,990 nested objects with 30-character keys, as a route body.
{ repeat "{\"$key\":" 9990; printf '1'; repeat '}' 9990; } >"$dir/route.json"
# The same under session_id: a key a route has, so the nesting is read.
{ printf '{"session_id":'; cat "$dir/route.json"; printf '}'; } >"$dir/route-field.json"
# What reading a body of that size costs: {} and spaces.
{ printf '{}'; repeat ' ' $(( $(stat -c %s "$dir/route.json") - 2 )); } >"$dir/route-flat.json"
# 9,999 levels of {"deploy": as a scope config.
{ repeat '{"deploy":' 9999; printf '1'; repeat '}' 9999; } >"$dir/put.json"

printf '| body | bytes | answer | RSS before | peak RSS | CPU per request |\n|---|---|---|---|---|---|\n'
for b in "POST /v1/scopes/demo/sessions route-flat.json" "POST /v1/scopes/demo/sessions route.json" "POST /v1/scopes/demo/sessions route-field.json" \
  "PUT /v1/scopes/demo/config put.json"; do
  read -r method path file <<<"$b"
  start_replica
  rss=$(kb VmRSS)
  echo 5 >"/proc/$pid/clear_refs"   # VmHWM := VmRSS
  cpu=$(cpu_ms)
  for ((i = 0; i < n; i++)); do
    answer=$(curl -s -o "$dir/answer" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
      --data-binary "@$dir/$file" "$url$path")
  done
  cpu=$(echo "($(cpu_ms) - $cpu) / $n" | bc -l)
  code=$(jq -r .error.code "$dir/answer" 2>/dev/null || echo '?')
  msg=$(jq -r .error.message "$dir/answer" 2>/dev/null | cut -c1-56)
  printf '| %s %s %s | %d | %s %s `%s` | %.1f MB | %.1f MB | %.1f ms |\n' "$method" "$path" "$file" \
    "$(stat -c %s "$dir/$file")" "$answer" "$code" "$msg" "$(echo "$rss / 1024" | bc -l)" \
    "$(echo "$(kb VmHWM) / 1024" | bc -l)" "$cpu"
  stop_replica
done
