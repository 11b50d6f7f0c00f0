package e2e

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// The workload of the linearizability checks: clients calling route, touch, end and get
// on a few sessions of one small scope (four pods of three sessions, a short queue)
// through two replicas on one Redis, each call recorded with the times it was made and
// answered.
const (
	linClients  = 200
	linOps      = 6 // per client
	linSessions = 30
	linScope    = "lin"
	linConfig   = `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":12,"pod_concurrency":3,` +
		`"queue_size":4,"wait_timeout_s":1,"session_ttl_s":600}}`
)

// TestSessionTableIsLinearizable records a history of 200 concurrent clients on two
// replicas and checks it with porcupine against a sequential model of the session
// table: a route of a bound session answers its pod (new: false), of an unbound one a
// pod (new: true) that it is bound to from then on, or an error that binds nothing;
// touch and end say whether the session was bound, and end unbinds it; get answers the
// bound pod or 404. The sessions do not expire while the test runs.
//
// The same workload against a replica whose route script treats live sessions as
// expired (one comparison flipped, loaded in place of the real script by a hook on
// that replica's Redis client) must be found not linearizable: the checker can tell.
func TestSessionTableIsLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("200 clients on two replicas; skipped with -short")
	}
	testredis.NeedReal(t)
	t.Run("sound", func(t *testing.T) {
		history := runSessionWorkload(t, nil)
		res, info := porcupine.CheckOperationsVerbose(sessionTable, history, 10*time.Second)
		if res != porcupine.Ok {
			t.Errorf("the history of %d calls is %s, want Ok; visualization: %s", len(history), res, visualize(t, info))
		}
	})
	t.Run("mutant", func(t *testing.T) {
		src := routeSource(t)
		const sound = "if e and tonumber(e) > now then"
		if strings.Count(src, sound) != 1 {
			t.Fatalf("session_route.lua has %d lines %q, want 1: change the mutation with the script", strings.Count(src, sound), sound)
		}
		mutant := strings.Replace(src, sound, "if e and tonumber(e) < now then", 1)
		history := runSessionWorkload(t, &scriptSwap{hash: redisstore.Scripts["session_route.lua"].Hash(), src: mutant})
		res, info := porcupine.CheckOperationsVerbose(sessionTable, history, 10*time.Second)
		if res != porcupine.Illegal {
			t.Errorf("the history of %d calls with a broken route script is %s, want Illegal; visualization: %s",
				len(history), res, visualize(t, info))
		}
	})
}

// sessionCall is a call of the workload: its kind (route, touch, end, get) and session.
type sessionCall struct {
	kind, session string
}

// sessionAnswer is what a call answered: the pod of a route or get ("" for a get's 404),
// the flag of the answer (new, touched, released), or the error code of a route.
type sessionAnswer struct {
	pod  string
	flag bool
	err  string
}

// sessionTable is the sequential model: the state of one session is the pod it is bound
// to, "" when unbound. Sessions are independent, so the history is checked per session.
var sessionTable = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			s := op.Input.(sessionCall).session
			if _, ok := by[s]; !ok {
				order = append(order, s)
			}
			by[s] = append(by[s], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, s := range order {
			out = append(out, by[s])
		}
		return out
	},
	Init: func() any { return "" },
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(string)))
		return h.Sum64()
	},
	Step: func(state, input, output any) (bool, any) {
		bound, in, out := state.(string), input.(sessionCall), output.(sessionAnswer)
		switch in.kind {
		case "route":
			switch {
			case out.err != "":
				return bound == "", bound
			case bound != "":
				return out.pod == bound && !out.flag, bound
			default:
				return out.pod != "" && out.flag, out.pod
			}
		case "get":
			return out.pod == bound, bound
		case "touch":
			return out.flag == (bound != ""), bound
		case "end":
			return out.flag == (bound != ""), ""
		}
		return false, bound
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(sessionCall), output.(sessionAnswer)
		switch {
		case out.err != "":
			return fmt.Sprintf("%s(%s) -> %s", in.kind, in.session, out.err)
		case in.kind == "route":
			return fmt.Sprintf("route(%s) -> %s new=%v", in.session, out.pod, out.flag)
		case in.kind == "get":
			return fmt.Sprintf("get(%s) -> %q", in.session, out.pod)
		}
		return fmt.Sprintf("%s(%s) -> %v", in.kind, in.session, out.flag)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}

// runSessionWorkload starts two replicas on a fresh Redis prefix (the second one's
// route script swapped when swap is set), makes the scope and runs the workload
// through both, returning its history.
func runSessionWorkload(t *testing.T, swap *scriptSwap) []porcupine.Operation {
	b := testserver.NewBacking(t)
	b.Fake.SetDeployDelay(20 * time.Millisecond)
	cfgB := b.Config("replica-b")
	cfgB.Redis = b.Redis.NewClient(t)
	if swap != nil {
		cfgB.Redis.AddHook(testredis.EachCommand(swap.swap))
	}
	_, a := testserver.Serve(t, b.Config("replica-a"))
	_, bb := testserver.Serve(t, cfgB)
	bases := []string{a.URL, bb.URL}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: linClients}}
	t.Cleanup(client.CloseIdleConnections)
	if code, body := linCall(t, client, http.MethodPut, a.URL+"/v1/scopes/"+linScope+"/config", linConfig); code != http.StatusOK {
		t.Fatalf("put config: %d %s", code, body)
	}

	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
	)
	for c := range linClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for range linOps {
				in := sessionCall{session: fmt.Sprintf("s%d", rng.IntN(linSessions))}
				switch n := rng.IntN(20); {
				case n < 8:
					in.kind = "route"
				case n < 13:
					in.kind = "get"
				case n < 16:
					in.kind = "touch"
				default:
					in.kind = "end"
				}
				base := bases[rng.IntN(len(bases))]
				call := time.Since(start).Nanoseconds()
				out, err := doSessionCall(client, base, in)
				ret := time.Since(start).Nanoseconds()
				if err != nil {
					t.Errorf("client %d: %s(%s): %v", c, in.kind, in.session, err)
					return
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(sessionCall), op.Output.(sessionAnswer)
		switch {
		case out.err != "":
			seen[in.kind+" "+out.err]++
		case in.kind == "get":
			seen[fmt.Sprintf("get found=%v", out.pod != "")]++
		default:
			seen[fmt.Sprintf("%s %v", in.kind, out.flag)]++
		}
	}
	t.Logf("%d calls in %s: %v", len(history), time.Since(start).Round(time.Millisecond), seen)
	return history
}

// doSessionCall makes one call of the workload and reads its answer; an answer the
// model does not know (a status or error code no call of the workload may give) is an
// error.
func doSessionCall(client *http.Client, base string, in sessionCall) (sessionAnswer, error) {
	path := base + "/v1/scopes/" + linScope + "/sessions"
	var code int
	var body []byte
	var err error
	switch in.kind {
	case "route":
		code, body, err = linDo(client, http.MethodPost, path, `{"session_id":"`+in.session+`"}`)
	case "get":
		code, body, err = linDo(client, http.MethodGet, path+"/"+in.session, "")
	case "touch":
		code, body, err = linDo(client, http.MethodPost, path+"/"+in.session+"/touch", "")
	case "end":
		code, body, err = linDo(client, http.MethodDelete, path+"/"+in.session, "")
	}
	if err != nil {
		return sessionAnswer{}, err
	}
	var v struct {
		PodID    string `json:"pod_id"`
		New      bool   `json:"new"`
		Touched  bool   `json:"touched"`
		Released bool   `json:"released"`
		Error    struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return sessionAnswer{}, fmt.Errorf("%d %s: %w", code, body, err)
	}
	switch {
	case code == http.StatusOK && in.kind == "route":
		return sessionAnswer{pod: v.PodID, flag: v.New}, nil
	case code == http.StatusOK && in.kind == "get":
		return sessionAnswer{pod: v.PodID}, nil
	case code == http.StatusOK:
		return sessionAnswer{flag: v.Touched || v.Released}, nil
	case code == http.StatusNotFound && in.kind == "get" && v.Error.Code == "SESSION_NOT_FOUND":
		return sessionAnswer{}, nil
	case in.kind == "route" && (v.Error.Code == "NO_POD_AVAILABLE" || v.Error.Code == "QUEUE_FULL" || v.Error.Code == "WAIT_TIMEOUT"):
		return sessionAnswer{err: v.Error.Code}, nil
	}
	return sessionAnswer{}, fmt.Errorf("unexpected answer %d %s", code, body)
}

func linDo(client *http.Client, method, url, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func linCall(t *testing.T, client *http.Client, method, url, body string) (int, string) {
	t.Helper()
	code, b, err := linDo(client, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// visualize writes porcupine's visualization of a checked history to a file of its own
// temporary directory, kept after the test, and returns the file's path.
func visualize(t *testing.T, info porcupine.LinearizationInfo) string {
	dir, err := os.MkdirTemp("", "warmpool-linearizability-")
	if err != nil {
		return err.Error()
	}
	path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "-")+".html")
	if err := porcupine.VisualizePath(sessionTable, info, path); err != nil {
		return err.Error()
	}
	return path
}

// routeSource is the source of the route script as the replicas run it, checked
// against the hash they run.
func routeSource(t *testing.T) string {
	t.Helper()
	src := redisstore.Sources["session_route.lua"]
	sum := sha1.Sum([]byte(src))
	if got, want := hex.EncodeToString(sum[:]), redisstore.Scripts["session_route.lua"].Hash(); got != want {
		t.Fatalf("the route script's source hashes to %s, the replicas run %s", got, want)
	}
	return src
}

// scriptSwap runs src wherever its client runs the script of hash (its swap method is
// the hook): a broken build of one script for one replica, made by the test alone.
type scriptSwap struct {
	hash, src string
}

// swap turns EVALSHA of the script into EVAL of the other source.
func (s *scriptSwap) swap(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && args[1] == s.hash {
		args[0], args[1] = "eval", s.src
	}
}
