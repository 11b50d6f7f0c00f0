#!/usr/bin/env bash
# perf.sh [OUTDIR] — the measurements of docs/performance.md, all on loopback, each run
# bounded (seconds): a throwaway redis-server, one `warmpool serve` on it with the fake
# driver (deploy delay $DELAY), then
#   1. redis-benchmark running session_route.lua as the server loads it (the source of
#      lua.Sources, printed by `wpbench script`) with EVALSHA, on a scope with warm pods,
#      a new session per call;
#   2. `warmpool loadtest` warm route mode (HTTP, one replica) flat out, redis-benchmark
#      again, then HTTP at half the redis-benchmark rate and at half the HTTP rate;
#   3. cold bursts of N = max_concurrency with deploy delay $DELAY;
#   4. RSS of a replica holding $HOLD sessions (loadtest warm hold mode), on the
#      redis-server and with the embedded Redis;
#   5. the warm-route baseline (`perf.sh baseline` alone): warmpool's CPU per affinity
#      route against the bare handler of scripts/routebaseline on the same Redis keys.
# The benchmark's scopes are made under another key prefix by a replica stopped before
# it runs, so no sweeper reads their (many) sessions during the other measurements.
# Environment: WARMPOOL_BIN (default bin/warmpool), DUR (5s), DELAY (500ms),
# HOLD (10000 sessions, held for HOLD_DUR, 20s; EMB_DUR, 40s, on the embedded Redis), CONC (16 concurrent clients of
# redis-benchmark), BENCH_N (90000).
#
# perf.sh scale [OUTDIR] — the scale benchmark (make scale): `wpbench scale`, sizes and
# lengths from SCALE_SIZES, SCALE_IDLE, SCALE_ROUTE, SCALE_RATE, SCALE_PASS, SCALE_RSS
# (see `bin/wpbench scale -h`). perf.sh baseline [OUTDIR] — step 5 alone.
# perf.sh reports [OUTDIR] — what agent reports cost: `wpbench reports` (10,000 pods
# reporting every 5 s; see `bin/wpbench reports -h`).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${WARMPOOL_BIN:-bin/warmpool}
mode=all
case ${1:-} in
scale | baseline | reports) mode=$1; shift ;;
esac
go build -o bin/wpbench ./scripts/wpbench
go build -o bin/routebaseline ./scripts/routebaseline
if [ "$mode" = scale ]; then
  exec bin/wpbench scale -bin "$BIN" ${1:+-out "$1"}
fi
if [ "$mode" = reports ]; then
  exec bin/wpbench reports -bin "$BIN" ${1:+-out "$1"}
fi
if [ "$mode" = baseline ]; then
  exec bin/wpbench baseline -bin "$BIN" -baseline-bin bin/routebaseline ${1:+-out "$1"}
fi
DUR=${DUR:-5s}
DELAY=${DELAY:-500ms}
HOLD=${HOLD:-10000}
CONC=${CONC:-16}
BENCH_N=${BENCH_N:-90000}
HOLD_DUR=${HOLD_DUR:-20s}
EMB_DUR=${EMB_DUR:-40s}
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/warmpool-perf.XXXXXX")}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/warmpool-perfrun.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  scripts/redis.sh stop "$work/redis" || true
  rm -rf "$work"
}
trap cleanup EXIT

say() { echo; echo "### $*"; }

# serve NAME ARGS... — start a replica on a free port; sets URL and SPID.
serve() {
  local name=$1
  shift
  "$BIN" serve --listen 127.0.0.1:0 --store "$work/$name.db" --log-level warn --log-format text "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  SPID=$!
  pids+=("$SPID")
  for _ in $(seq 100); do grep -q listening "$work/$name.out" 2>/dev/null && break; sleep 0.1; done
  URL=$(grep -o 'http://[0-9.:]*' "$work/$name.out")
}

# cpu PID — CPU seconds (user + system) a process used so far.
cpu() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }

# rss PID — VmRSS and VmHWM (peak) of a process.
rss() { awk '/^VmRSS|^VmHWM/ {printf "%s %s kB  ", $1, $2} END {print ""}' "/proc/$1/status"; }

# watchrss PID CMD... — run CMD, sampling PID's VmRSS every 0.2 s; prints the largest.
watchrss() {
  local pid=$1 max=0 v
  shift
  "$@" &
  local cmd=$!
  while kill -0 "$cmd" 2>/dev/null; do
    v=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    [ "$v" -gt "$max" ] && max=$v
    sleep 0.2
  done
  wait "$cmd" || true
  echo "max VmRSS sampled during the run: $max kB; after: $(rss "$pid")"
}

lt() { "$BIN" loadtest --server "$URL" --progress -1s "$@"; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "redis:   $(redis-server --version | cut -d' ' -f3)  go: $(go version | cut -d' ' -f3)"

addr=$(scripts/redis.sh start "$work/redis")
port=${addr##*:}
rpid=$(cat "$work/redis/redis.pid")

# --- 1. redis-benchmark: the route script with EVALSHA ---------------------------------
# The benchmark's scopes live under their own key prefix, made warm by a short-lived
# replica that is stopped before the benchmark: no sweeper reads their sessions.
say "redis-benchmark: session_route.lua by EVALSHA on warm pods, a new session per call"
serve setup --redis "redis://$addr/0" --prefix bench: --driver fake --sweep-interval 200ms
printf '%s\n' '{"pool": {"max_concurrency": 100000, "pod_concurrency": 10000, "min_idle_pods": 10,' \
  '"pod_ttl_s": 3600, "session_ttl_s": 3600, "queue_size": 0, "wait_timeout_s": 0}}' >"$work/bench.json"
# Two scopes of 10 warm pods x 10000 slots: one per redis-benchmark run.
for s in perf-bench1 perf-bench2; do
  "$BIN" scope put "$s" -f "$work/bench.json" --server "$URL" >/dev/null
done
for s in perf-bench1 perf-bench2; do
  for _ in $(seq 100); do
    [ "$("$BIN" pool "$s" --server "$URL" | grep -c '"state": "idle"')" -ge 10 ] && break
    sleep 0.2
  done
  echo "$s: $("$BIN" pool "$s" --server "$URL" | grep -c '"state": "idle"') warm pods"
done
kill "$SPID"
wait "$SPID" || true

serve main --redis "redis://$addr/0" --driver fake --fake-deploy-delay "$DELAY"
echo "replica: $URL (pid $SPID) on redis $addr, sweep interval 2s (default); $(rss "$SPID")"

# The script as the server loads it (lua.Sources): the helpers, the deadline guard and
# the due notes assembled around session_route.lua.
sha=$(redis-cli -p "$port" SCRIPT LOAD "$(bin/wpbench script session_route.lua)")
now=$(($(date +%s%N) / 1000000))
keys() {
  # session_route.lua's KEYS as redisstore.Store passes them; its two extra keys are those of
  # request id "" (a route without one)
  bin/wpbench keys session_route.lua bench: "$1" "bench:{$1}:idem:route:" "bench:{$1}:idem:run:"
}
nkeys=$(keys SCOPE | wc -w)
# bench SCOPE — one redis-benchmark run on SCOPE; prints "rps p50 p95 p99 max" (ms) and
# the CPU seconds redis-server used.
bench() {
  local c0 c1 line
  c0=$(cpu "$rpid")
  # shellcheck disable=SC2046
  line=$(redis-benchmark -p "$port" -c "$CONC" -n "$BENCH_N" -r 1000000000 --csv \
    EVALSHA "$sha" "$nkeys" $(keys "$1") "$now" "b:__rand_int__" "" 0 0 "" 0 "$now" PUBLISH 0 | tail -1)
  c1=$(cpu "$rpid")
  echo "$line" | tr -d '"' | awk -F, -v c="$(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}')" \
    '{n = NF; print $(n-6), "req/s  p50", $(n-3), "p95", $(n-2), "p99", $(n-1), "max", $n, "ms  redis-server CPU", c, "s"}'
}
rpsof() { awk '{print $1}'; }
# shellcheck disable=SC2046
echo "one call: $(redis-cli -p "$port" EVALSHA "$sha" "$nkeys" $(keys perf-bench1) "$now" probe-1 "" 0 0 "" 0 "$now" PUBLISH 0 | head -2 | tr '\n' ' ')"
echo "redis-benchmark -p $port -c $CONC -n $BENCH_N -r 1000000000 --csv EVALSHA $sha $nkeys $(keys SCOPE) $now b:__rand_int__ '' 0 0 '' 0 $now PUBLISH 0"
b1=$(bench perf-bench1)
echo "run 1: $b1"
rps1=$(echo "$b1" | rpsof)

# --- 2. HTTP: warm route through one replica ----------------------------------------------
route=(--scenario warm --warm-mode route --pod-concurrency 10000 --max-concurrency 100000 --duration "$DUR")
http=0
for w in 16 32 64; do
  say "HTTP warm route, flat out: warmpool loadtest ${route[*]} --workers $w"
  s0=$(cpu "$SPID") r0=$(cpu "$rpid")
  lt "${route[@]}" --workers "$w" --out "$out/warm-route-$w" | grep -E 'requests in|route |NOTE'
  echo "CPU seconds: replica $(awk -v a="$s0" -v b="$(cpu "$SPID")" 'BEGIN {print b - a}'), redis-server $(awk -v a="$r0" -v b="$(cpu "$rpid")" 'BEGIN {print b - a}') (incl. warm-up and cleanup)"
  r=$(awk '/"kind": "route"/ {f = 1} f && /"ok_rps"/ {gsub(/,/, ""); print $2; exit}' "$out/warm-route-$w/results.json")
  http=$(awk -v a="$http" -v b="$r" 'BEGIN {print (b > a) ? b : a}')
done
echo "the server runs the same script (SCRIPT EXISTS $sha): $(redis-cli -p "$port" SCRIPT EXISTS "$sha")"
b2=$(bench perf-bench2)
echo "redis-benchmark run 2: $b2"
rps2=$(echo "$b2" | rpsof)
echo "HTTP route/s (best of the three) $http; redis-benchmark $rps1 and $rps2; ratio $(awk -v h="$http" -v a="$rps1" -v b="$rps2" 'BEGIN {printf "%.2f", 2 * h / (a + b)}')"
half=$(awk -v a="$rps1" -v b="$rps2" 'BEGIN {printf "%d", (a + b) / 4}')
halfhttp=$(awk -v a="$http" 'BEGIN {printf "%d", a / 2}')

say "HTTP warm route at half the redis-benchmark rate: ${route[*]} --workers 64 --rate $half"
lt "${route[@]}" --workers 64 --rate "$half" --out "$out/warm-route-half-bench" | grep -E 'requests in|route |NOTE'
say "HTTP warm route at half the HTTP rate: ${route[*]} --workers 64 --rate $halfhttp"
lt "${route[@]}" --workers 64 --rate "$halfhttp" --out "$out/warm-route-half-http" | grep -E 'requests in|route |NOTE'
say "HTTP warm cycle (route → touch → end) flat out: --scenario warm --sessions 64 --workers $CONC --pod-concurrency 4"
lt --scenario warm --sessions 64 --workers "$CONC" --pod-concurrency 4 --duration "$DUR" \
  --out "$out/warm-cycle" | grep -E 'requests in|route |touch |end |NOTE'

# --- 3. cold bursts ---------------------------------------------------------------------
for spec in 8:2 64:4; do
  n=${spec%:*} pc=${spec#*:}
  say "cold burst N = max_concurrency = $n, pod_concurrency $pc, deploy delay $DELAY: --scenario cold --max-concurrency $n --pod-concurrency $pc --bursts 3"
  lt --scenario cold --max-concurrency "$n" --pod-concurrency "$pc" --bursts 3 --deploy-delay "$DELAY" \
    --out "$out/cold-$n" | grep -E 'route |burst |all served|NOTE'
done

# --- 4. RSS holding sessions ----------------------------------------------------------------
hold=(--scenario warm --warm-mode hold --sessions "$HOLD" --workers "$CONC" --pod-concurrency 100 --duration "$HOLD_DUR")
say "RSS of a fresh replica on redis-server holding $HOLD sessions: ${hold[*]}"
kill "$SPID"
wait "$SPID" || true
serve hold --redis "redis://$addr/0" --driver fake
echo "replica: $URL (pid $SPID); before: $(rss "$SPID")"
watchrss "$SPID" lt "${hold[@]}" --out "$out/hold-redis" | grep -E 'requests in|route |touch |VmRSS|NOTE'

say "RSS of a replica with the embedded Redis (serve --dev) holding $HOLD sessions"
kill "$SPID"
wait "$SPID" || true
serve embedded --dev --driver fake
echo "replica: $URL (pid $SPID); before: $(rss "$SPID")"
# the embedded Redis routes slower: give it time to reach $HOLD sessions
watchrss "$SPID" lt "${hold[@]}" --duration "$EMB_DUR" --out "$out/hold-embedded" | grep -E 'requests in|route |touch |VmRSS|NOTE'
kill "$SPID"
wait "$SPID" || true

# --- 5. the warm-route baseline -------------------------------------------------------------
say "warm route: warmpool's CPU per route against the bare handler of scripts/routebaseline"
bin/wpbench baseline -bin "$BIN" -baseline-bin bin/routebaseline -out "$out/baseline"
echo
echo "reports in $out"
