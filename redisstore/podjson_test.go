package redisstore

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// TestDecodePlainPod checks that the pod record's fast decoder decodes what
// encoding/json decodes whenever it takes a record, and that it takes the records
// json.Marshal writes of pods with none of &<>, a quote, a backslash or a control
// character in their strings.
func TestDecodePlainPod(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", "/", ":", ".", "-", "_", "?", "=", " ", "é", "&", "<", `"`, `\`, "\n", "\u2028", "\x7f"}
	str := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 5000 {
		pod := warmpool.Pod{ScopeID: str(), DeployVer: str(), Fence: rng.Int64() - rng.Int64(), Namespace: str(),
			SSEURL: "http://" + str(), HealthURL: str(), CreatedAt: rng.Int64N(1 << 50)}
		raw, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		plain := !strings.ContainsAny(pod.ScopeID+pod.DeployVer+pod.Namespace+pod.SSEURL+pod.HealthURL, "&<\"\\\n\u2028")
		var got warmpool.Pod
		if ok := decodePlainPod(string(raw), &got); ok != plain {
			t.Fatalf("%s: taken %v, want %v", raw, ok, plain)
		} else if ok && got != pod {
			t.Fatalf("%s: decoded %+v, want %+v", raw, got, pod)
		}
	}
	for _, raw := range []string{
		`{}`, `{"pod_id":"p1"}`, `{"fence":0}`, `{"fence":-0}`, `{"fence":-12,"fence":13}`,
		`{"fence":012}`, `{"fence":1.5}`, `{"fence":1e3}`, `{"fence":-}`, `{"fence":9223372036854775808}`,
		`{"fence":"1"}`, `{"pod_sse_url":1}`, `{"pod_sse_url":null}`, `{"POD_SSE_URL":"x"}`, `{"other":"x"}`,
		`{"scope_id":"a\u0062"}`, `{"scope_id":"a` + "\xff" + `"}`, `{"scope_id":"a` + "\t" + `"}`,
		`{ "scope_id":"a"}`, `{"scope_id":"a",}`, `{"scope_id":"a"}x`, `{"scope_id":"a"`, `{"scope_id"}`,
		`{"scope_id":"a"}}`, `[]`, `{`, `{}{}`,
	} {
		var want warmpool.Pod
		wantErr := json.Unmarshal([]byte(raw), &want)
		var got warmpool.Pod
		if decodePlainPod(raw, &got) && (wantErr != nil || got != want) {
			t.Errorf("%s: decoded %+v, encoding/json: %+v, %v", raw, got, want, wantErr)
		}
	}
}
