//go:build e2e_k8s && bench_k8s

package k8s_e2e

// make bench-k8s: cold-route bursts through built `warmpool serve` replicas on the rig,
// measured as docs/performance.md reports them: routes/s, p50/p99, the API server's
// requests per deploy (its own apiserver_request_total), the CPU per deploy of every
// process (from /proc), 429s and priority-and-fairness rejections. BENCH_K8S_RUNS picks
// the runs ("REPLICAS:BURST:SCOPES[:sa]", comma-separated; sa: the replicas use
// deploy/base's ServiceAccount, whose requests priority and fairness governs);
// BENCH_K8S_OUT, when set, receives the table.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/testredis"
)

const defaultBenchRuns = "1:50:1,1:200:1,1:1000:1,1:200:100,1:1000:100,3:200:1,3:1000:100,1:1000:1:sa"

type benchRun struct {
	replicas, burst, scopes int
	sa                      bool
}

func (b benchRun) String() string {
	s := fmt.Sprintf("%d replica(s), burst %d over %d scope(s)", b.replicas, b.burst, b.scopes)
	if b.sa {
		s += ", ServiceAccount"
	}
	return s
}

func TestBenchK8s(t *testing.T) {
	spec := os.Getenv("BENCH_K8S_RUNS")
	if spec == "" {
		spec = defaultBenchRuns
	}
	var runs []benchRun
	for _, f := range strings.Split(spec, ",") {
		p := strings.Split(strings.TrimSpace(f), ":")
		if len(p) < 3 {
			t.Fatalf("BENCH_K8S_RUNS item %q: want REPLICAS:BURST:SCOPES[:sa]", f)
		}
		var r benchRun
		var err error
		for i, dst := range []*int{&r.replicas, &r.burst, &r.scopes} {
			if *dst, err = strconv.Atoi(p[i]); err != nil || *dst < 1 {
				t.Fatalf("BENCH_K8S_RUNS item %q: %q is not a positive number", f, p[i])
			}
		}
		r.sa = len(p) > 3 && p[3] == "sa"
		runs = append(runs, r)
	}
	var table strings.Builder
	table.WriteString("| run | served | routes/s | p50 ms | p99 ms | API requests per deploy | 429 / APF rejected | CPU ms per deploy (net of idle): warmpool, apiserver, etcd, scheduler, kwok, redis | CPU busy | load avg |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range runs {
		// A subtest each: its replicas stop and its pods go before the next run starts.
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			row := benchOne(t, r)
			t.Log(row)
			table.WriteString(row + "\n")
		})
	}
	t.Logf("\n%s", table.String())
	if out := os.Getenv("BENCH_K8S_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// benchOne runs one burst in a fresh namespace and returns its table row.
func benchOne(t *testing.T, run benchRun) string {
	ctx := context.Background()
	ns := mustNamespace(t)
	t.Cleanup(func() { deleteManagedPods(t, ns) })
	kubeconfig := os.Getenv("WARMPOOL_KUBECONFIG")
	if run.sa {
		kubeconfig = saKubeconfig(t, ns)
	}
	r := testredis.New(t)
	store := filepath.Join(t.TempDir(), "config.db")
	var reps []*benchReplica
	for i := range run.replicas {
		reps = append(reps, startBenchReplica(t, r, ns, store, kubeconfig, i))
	}
	perScope := (run.burst + run.scopes - 1) / run.scopes
	scopes := make([]string, run.scopes)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("b%d-%d", run.burst, i)
		doc := fmt.Sprintf(`{"pool":{"pod_concurrency":1,"max_concurrency":%d,"wait_timeout_s":600,"session_ttl_s":3600,"pod_ttl_s":3600},"deploy":{"ready_timeout_s":600}}`, perScope)
		if rep := reps[0].call(http.MethodPut, "/v1/scopes/"+scopes[i]+"/config", doc); rep.status != http.StatusOK {
			t.Fatalf("PUT config: %v", rep)
		}
	}
	procs := benchProcs(t, r, reps)
	// What every process spends with nothing to do (sweeps, informer resyncs, the
	// other helpers' share of the caches): measured over idleWindow before the burst
	// and taken off the burst's CPU, so that a slow burst on a loaded machine is not
	// charged for the time it lasted.
	const idleWindow = 3 * time.Second
	cpuIdle0 := cpuOf(t, procs)
	time.Sleep(idleWindow)
	reqBefore := apiRequests(t, ctx)
	cpuBefore := cpuOf(t, procs)
	lat := make([]time.Duration, run.burst)
	codes := make([]int, run.burst)
	var retries atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range run.burst {
		wg.Go(func() {
			// A gateway's client: a 503 is asked again a second later (the retry_after
			// each of them names).
			t0 := time.Now()
			for attempt := 0; ; attempt++ {
				rep := reps[i%len(reps)].call(http.MethodPost, "/v1/scopes/"+scopes[i%len(scopes)]+"/sessions", fmt.Sprintf(`{"session_id":"s%d"}`, i))
				codes[i] = rep.status
				if rep.status == http.StatusServiceUnavailable && attempt < 10 {
					retries.Add(1)
					time.Sleep(time.Second)
					continue
				}
				if rep.status != http.StatusOK && rep.status != http.StatusCreated {
					t.Logf("route %d: %v", i, rep)
				}
				break
			}
			lat[i] = time.Since(t0)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	cpuAfter := cpuOf(t, procs)
	reqAfter := apiRequests(t, ctx)
	load, _ := os.ReadFile("/proc/loadavg")

	served := 0
	for _, c := range codes {
		if c == http.StatusOK || c == http.StatusCreated {
			served++
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	d := float64(max(served, 1))
	delta := func(k string) float64 { return reqAfter[k] - reqBefore[k] }
	perDeploy := fmt.Sprintf("%.2f (pods create %.2f, get %.2f, list+watch %.2f; binding %.2f, status %.2f)",
		(reqAfter["total"]-reqBefore["total"])/d, delta("POST pods")/d, delta("GET pods")/d,
		(delta("LIST pods")+delta("WATCH pods"))/d, delta("POST pods/binding")/d,
		(delta("PATCH pods/status")+delta("PUT pods/status"))/d)
	var cpu []string
	var busy float64
	for _, name := range []string{"warmpool", "kube-apiserver", "etcd", "kube-scheduler", "kwok", "redis-server"} {
		ms := cpuAfter[name] - cpuBefore[name]
		idle := (cpuBefore[name] - cpuIdle0[name]) / idleWindow.Seconds() * wall.Seconds()
		busy += ms
		cpu = append(cpu, fmt.Sprintf("%.2f (%.2f)", ms/d, max(ms-idle, 0)/d))
	}
	return fmt.Sprintf("| %s | %d/%d (%d retried 503s) | %.0f | %.0f | %.0f | %s | %.0f / %.0f | %s | %.0f%% of %d cores | %s |",
		run, served, run.burst, retries.Load(), float64(served)/wall.Seconds(), pct(0.5), pct(0.99), perDeploy,
		delta("429"), delta("apf_rejected"), strings.Join(cpu, ", "),
		100*busy/(wall.Seconds()*1000*float64(runtime.NumCPU())), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
}

// benchReplica is one `warmpool serve` of a run.
type benchReplica struct {
	*service
	pid int
}

func startBenchReplica(t *testing.T, r *testredis.Redis, ns, store, kubeconfig string, i int) *benchReplica {
	t.Helper()
	s, pid := serveProc(t, r, ns, &http.Client{Timeout: 15 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 2000}},
		"--store", store, "--kubeconfig", kubeconfig,
		"--instance-id", fmt.Sprintf("bench-%d-%d", i, rand.IntN(1e6)), "--log-level", "warn")
	return &benchReplica{service: s, pid: pid}
}

// benchProcs are the pids whose CPU a run reports, by process name: the rig's (from
// the pid files beside its kubeconfig), the replicas' and redis-server's.
func benchProcs(t *testing.T, r *testredis.Redis, reps []*benchReplica) map[string][]int {
	t.Helper()
	procs := map[string][]int{}
	dir := filepath.Dir(os.Getenv("WARMPOOL_KUBECONFIG"))
	for _, name := range []string{"kube-apiserver", "etcd", "kube-scheduler", "kwok"} {
		raw, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = []int{pid}
	}
	for _, rep := range reps {
		procs["warmpool"] = append(procs["warmpool"], rep.pid)
	}
	info, err := r.Admin.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if pid, err := strconv.Atoi(v); err == nil {
				procs["redis-server"] = []int{pid}
			}
		}
	}
	return procs
}

// cpuOf is the CPU time (user + system, ms) each named group of processes has used.
func cpuOf(t *testing.T, procs map[string][]int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, pids := range procs {
		for _, pid := range pids {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// The fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
			f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
			ut, _ := strconv.ParseFloat(f[11], 64)
			st, _ := strconv.ParseFloat(f[12], 64)
			out[name] += (ut + st) * 10 // USER_HZ is 100 on Linux
		}
	}
	return out
}

// apiRequests sums the API server's apiserver_request_total: "VERB resource[/sub]"
// for pods, "429" for every answer of that code, "total", and "apf_rejected" from
// apiserver_flowcontrol_rejected_requests_total.
func apiRequests(t *testing.T, ctx context.Context) map[string]float64 {
	t.Helper()
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				l[k] = strings.Trim(val, `"`)
			}
		}
		switch name {
		case "apiserver_request_total":
			out["total"] += v
			if l["code"] == "429" {
				out["429"] += v
			}
			if l["resource"] == "pods" {
				res := "pods"
				if l["subresource"] != "" {
					res += "/" + l["subresource"]
				}
				out[l["verb"]+" "+res] += v
			}
		case "apiserver_flowcontrol_rejected_requests_total":
			out["apf_rejected"] += v
		}
	}
	return out
}
