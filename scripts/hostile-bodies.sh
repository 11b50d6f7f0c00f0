#!/usr/bin/env bash
# hostile-bodies.sh [BIN [N [WHICH]]] — what a replica pays for hostile bodies
# (docs/reliability.md): one built replica BIN (default bin/warmpool; fake driver, SQLite
# store, reports on) on the redis-server of REDIS_ADDR per case. WHICH is nested (the
# nested bodies of issue 20), reports (the agent reports of issue 31) or all (default).
# Nested: each body sent N times (default 1): its size, the answer, the replica's RSS
# before, its peak RSS (VmHWM, reset before the body) and the CPU time of the replica
# per request. Reports: 100 concurrent 1 MiB bodies with a wrong token, and N reports
# each of a pod's own token: of 1 KiB (one session), of 10,000 sessions, and 100
# concurrent 1 MiB ones; the same figures and Redis's CPU per request (INFO cpu).
#   scripts/with-redis.sh scripts/hostile-bodies.sh bin/warmpool 20
set -euo pipefail
bin=${1:-bin/warmpool}
n=${2:-1}
which=${3:-all}
secret=hostile-bodies-report-secret
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
    --prefix "hb$port:" --driver fake --log-level warn --report-secret "$secret" >"$dir/out.log" 2>&1 &
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

nested() {
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
}

# redis_cpu_ms: milliseconds of CPU Redis has used.
redis_cpu_ms() {
  redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" INFO cpu |
    awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { print s * 1000 }'
}

# token POD: the pod's report token as the replica makes it: "demo~POD~MAC" (the MAC
# alone from a replica before issue 31, which the caller tells by its 401).
mac() {
  printf 'warmpool report\0demo\0%s' "$1" |
    openssl dgst -sha256 -mac HMAC -macopt "hexkey:$(printf %s "$secret" | sha256sum | cut -d' ' -f1)" -binary |
    base64 | tr '+/' '-_' | tr -d '='
}

# post FILE TOKEN: one report, its status.
post() {
  curl -s -o "$dir/answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $2" --data-binary "@$dir/$1" "$url/v1/agents/report"
}

reports() {
  printf '| report | bytes | times | answer | RSS before | peak RSS | replica CPU per request | Redis CPU per request |\n|---|---|---|---|---|---|---|---|\n'
  local c file times par tok code
  for c in "wrong-token report-1mib.json 100 100" "own-token report-1kib.json $n 1" \
    "own-token report-10k.json $n 1" "own-token report-1mib.json 100 100"; do
    read -r tok file times par <<<"$c"
    start_replica
    curl -fs -X PUT -H 'Content-Type: application/json' --data '{"pool":{"max_concurrency":8,"pod_concurrency":2}}' \
      "$url/v1/scopes/demo/config" >/dev/null
    pod=$(curl -fs -X POST -H 'Content-Type: application/json' --data '{"session_id":"s1"}' \
      "$url/v1/scopes/demo/sessions" | jq -r .pod_id)
    head='{"pod_id":"'$pod'","scope_id":"demo","sessions":["s1"'
    { printf '%s]}' "$head"; repeat ' ' $(( 1024 - ${#head} - 2 )); } >"$dir/report-1kib.json"
    { printf '%s' "$head"; for ((i = 2; i <= 10000; i++)); do printf ',"s%d"' $i; done; printf ']}'; } >"$dir/report-10k.json"
    { printf '%s]}' "$head"; repeat ' ' $(( (1 << 20) - ${#head} - 2 )); } >"$dir/report-1mib.json"
    if [ "$tok" = wrong-token ]; then
      tok="demo~$pod~$(mac "$pod" | tr 'A-Za-z' 'B-ZAb-za')"   # the MAC changed
    else
      tok="demo~$pod~$(mac "$pod")"
      [ "$(post report-1kib.json "$tok")" = 401 ] && tok=$(mac "$pod")   # a replica before issue 31
    fi
    rss=$(kb VmRSS)
    echo 5 >"/proc/$pid/clear_refs"
    cpu=$(cpu_ms)
    rcpu=$(redis_cpu_ms)
    for ((i = 0; i < times; i += par)); do
      local posts=()
      for ((j = 0; j < par; j++)); do post "$file" "$tok" >"$dir/code.$j" & posts+=($!); done
      wait "${posts[@]}"   # not the replica
    done
    code=$(cat "$dir/code.0")
    cpu=$(echo "($(cpu_ms) - $cpu) / $times" | bc -l)
    rcpu=$(echo "($(redis_cpu_ms) - $rcpu) / $times" | bc -l)
    err=$(jq -r '.error.code // "ok"' "$dir/answer" 2>/dev/null || echo '?')
    printf '| %s %s | %d | %d (%d at once) | %s %s | %.1f MB | %.1f MB | %.2f ms | %.3f ms |\n' "${c%% *}" "$file" \
      "$(stat -c %s "$dir/$file")" "$times" "$par" "$code" "$err" "$(echo "$rss / 1024" | bc -l)" \
      "$(echo "$(kb VmHWM) / 1024" | bc -l)" "$cpu" "$rcpu"
    stop_replica
  done
}

case $which in
  nested) nested ;;
  reports) reports ;;
  all) nested; echo; reports ;;
  *) echo "hostile-bodies.sh: WHICH is nested, reports or all, not $which" >&2; exit 2 ;;
esac
