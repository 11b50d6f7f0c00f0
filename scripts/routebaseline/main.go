// Command routebaseline is the warm-route baseline of docs/performance.md: a bare
// net/http + go-redis handler of POST /v1/scopes/{scope}/sessions that runs the very
// script a replica runs (redisstore.Sources["session_route.lua"]) with the same keys and
// arguments, and answers the binding. It has no router, middleware, validation,
// metrics or slow path: what a replica spends beyond it is warmpool's own cost.
//
//	routebaseline -redis 127.0.0.1:6379 -listen 127.0.0.1:0
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:0", "HTTP listen address")
	flag.Parse()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	route := redis.NewScript(redisstore.Sources["session_route.lua"])
	keys := redisstore.NewKeyspace("")
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	http.HandleFunc("POST /v1/scopes/{scope}/sessions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			SessionID string `json:"session_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		k, now := keys.Scope(r.PathValue("scope")), time.Now()
		// KEYS and ARGV as redisstore.Store.SessionRoute passes them (a route without a
		// request id), with the deadline that Store.call appends.
		kk, err := redisstore.ScriptKeys("session_route.lua", k, k.RouteAnswer(""), k.IdemMark(""))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		v, err := route.Run(r.Context(), rdb, kk,
			ms(now), req.SessionID, "", "", 60000, "", "0", ms(now.Add(redisstore.GrantTTL)), "PUBLISH", ms(now.Add(3*time.Second))).Slice()
		if err != nil || len(v) < 4 || (v[0] != redisstore.RouteBound && v[0] != redisstore.RouteNew) {
			http.Error(w, fmt.Sprintf("route: %v %v", v, err), http.StatusServiceUnavailable)
			return
		}
		var pod warmpool.Pod
		_ = json.Unmarshal([]byte(fmt.Sprint(v[3])), &pod)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"scope_id": r.PathValue("scope"), "session_id": req.SessionID,
			"pod_id": v[2], "pod_sse_url": pod.SSEURL, "deploy_ver": pod.DeployVer, "new": fmt.Sprint(v[1]) == "1"})
	})
	http.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("routebaseline listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, nil))
}
