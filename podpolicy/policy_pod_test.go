package podpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// The caps hold the pod's requests and limits as the scheduler counts them: the larger
// of the regular containers with the sidecars (restartable init containers) and the
// peak of the init containers (each with the sidecars started before it), the
// pod-level resources when they are larger, plus spec.overhead; a container that gives
// a limit and no request requests its limit, as the API server defaults it.
func TestPolicyCountsEveryRequest(t *testing.T) {
	ctx := context.Background()
	tmpl := func(spec string) string { return `{"pod_template":{"spec":` + spec + `}}` }
	agent := func(res string) string { return `{"name":"agent","resources":` + res + `}` }
	for _, tc := range []struct {
		name, deploy string
		want         string // "" = accepted
	}{
		{"init container over the cap", tmpl(`{"initContainers":[{"name":"i","image":"x","resources":{"requests":{"cpu":"3"}}}],"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"the pod requests 3 cpu, over --max-pod-cpu 2"},
		{"init containers run one at a time, before the containers", tmpl(`{"initContainers":[{"name":"i","image":"x","resources":{"requests":{"cpu":"2"}}},{"name":"j","image":"x","resources":{"requests":{"cpu":"2"}}}],"containers":[` + agent(`{"requests":{"cpu":"2"}}`) + `]}`),
			""},
		{"a sidecar runs beside the containers", tmpl(`{"initContainers":[{"name":"s","image":"x","restartPolicy":"Always","resources":{"requests":{"cpu":"1"}}}],"containers":[` + agent(`{"requests":{"cpu":"1500m"}}`) + `]}`),
			"the pod requests 2500m cpu, over --max-pod-cpu 2"},
		{"a sidecar runs beside the init containers after it", tmpl(`{"initContainers":[{"name":"s","image":"x","restartPolicy":"Always","resources":{"requests":{"cpu":"1"}}},{"name":"i","image":"x","resources":{"requests":{"cpu":"1500m"}}}],"containers":[` + agent(`{"requests":{"cpu":"100m"}}`) + `]}`),
			"the pod requests 2500m cpu, over --max-pod-cpu 2"},
		{"overhead", tmpl(`{"overhead":{"cpu":"1500m"},"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"the pod requests 2500m cpu, over --max-pod-cpu 2"},
		{"a limit without a request is requested", tmpl(`{"containers":[` + agent(`{"limits":{"cpu":"1500m"}}`) + `,{"name":"side","image":"x","resources":{"requests":{"cpu":"1"}}}]}`),
			"the pod requests 2500m cpu, over --max-pod-cpu 2"},
		{"pod-level requests", tmpl(`{"resources":{"requests":{"cpu":"3"}},"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"the pod requests 3 cpu, over --max-pod-cpu 2"},
		{"init container limits", tmpl(`{"initContainers":[{"name":"i","image":"x","resources":{"requests":{"cpu":"1"},"limits":{"cpu":"3"}}}],"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"the pod's cpu limits add up to 3, over --max-pod-cpu 2"},
		{"overhead adds to a set limit", tmpl(`{"overhead":{"cpu":"1"},"containers":[` + agent(`{"requests":{"cpu":"1"},"limits":{"cpu":"1500m"}}`) + `]}`),
			"the pod's cpu limits add up to 2500m, over --max-pod-cpu 2"},
		{"init memory", tmpl(`{"initContainers":[{"name":"i","image":"x","resources":{"requests":{"memory":"2Gi"}}}],"containers":[` + agent(`{"requests":{"memory":"256Mi"}}`) + `]}`),
			"the pod requests 2Gi memory, over --max-pod-memory 1Gi"},
		{"zero in an init container", tmpl(`{"initContainers":[{"name":"i","image":"x","resources":{"requests":{"cpu":"0"}}}],"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"deploy.pod_template.spec.initContainers[0].resources.requests.cpu: must be more than zero"},
		{"overflowing overhead", tmpl(`{"overhead":{"memory":"99999999999999999999999"},"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"deploy.pod_template.spec.overhead.memory:"},
		{"overflowing pod-level limit", tmpl(`{"resources":{"limits":{"cpu":"99999999999999999999999"}},"containers":[` + agent(`{"requests":{"cpu":"1"}}`) + `]}`),
			"deploy.pod_template.spec.resources.limits.cpu:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mustPolicy(t, Config{MaxPodCPU: "2", MaxPodMemory: "1Gi"}).Check(ctx, "s", specOf(t, tc.deploy))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case warmpool.ErrorCode(err) != warmpool.CodeValidation:
				t.Fatalf("error %v, want VALIDATION saying %q", err, tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// Every image a pod names is held to --image-prefixes: its containers', its init
// containers' and its image volumes'; ephemeral containers, which Kubernetes refuses
// in a pod's create, are refused whatever their image.
func TestPolicyChecksEveryImage(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, Config{ImagePrefixes: []string{"reg.example/"}})
	tmpl := func(spec string) warmpool.DeploySpec {
		return specOf(t, `{"image":"reg.example/agent:1","pod_template":{"spec":`+spec+`}}`)
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"init container", `{"initContainers":[{"name":"i","image":"evil/init:1"}],"containers":[{"name":"agent"}]}`,
			`deploy.pod_template.spec.initContainers[0].image: "evil/init:1" does not start with an allowed prefix`},
		{"image volume", `{"volumes":[{"name":"ok","emptyDir":{}},{"name":"tools","image":{"reference":"evil/tools:1"}}],"containers":[{"name":"agent"}]}`,
			`deploy.pod_template.spec.volumes[1].image.reference: "evil/tools:1" does not start with an allowed prefix`},
		{"ephemeral container", `{"ephemeralContainers":[{"name":"debug","image":"evil/debug:1","securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}],"containers":[{"name":"agent"}]}`,
			`deploy.pod_template.spec.ephemeralContainers: Kubernetes refuses them in a pod's create`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(ctx, "s", tmpl(tc.spec))
			if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want VALIDATION saying %q", err, tc.want)
			}
		})
	}
	ok := tmpl(`{"volumes":[{"name":"tools","image":{"reference":"reg.example/tools:1"}}],"containers":[{"name":"agent"}]}`)
	if err := p.Check(ctx, "s", ok); err != nil {
		t.Errorf("an allowed image volume: %v", err)
	}
}

// A pod has at most maxPodContainers containers, maxPodInitContainers init containers
// and maxPodVolumes volumes; the cap is refused once, by its path, not once an item.
func TestPolicyCapsTheLists(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, Config{})
	list := func(n int, item string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(item, i)
		}
		return strings.Join(items, ",")
	}
	spec := func(containers, inits, volumes int) warmpool.DeploySpec {
		return specOf(t, `{"pod_template":{"spec":{"containers":[{"name":"agent"}`+strings.Repeat(",", min(containers-1, 1))+
			list(containers-1, `{"name":"c%d","image":"x"}`)+`],"initContainers":[`+list(inits, `{"name":"i%d","image":"x"}`)+
			`],"volumes":[`+list(volumes, `{"name":"v%d","emptyDir":{}}`)+`]}}}`)
	}
	if err := p.Check(ctx, "s", spec(maxPodContainers, maxPodInitContainers, maxPodVolumes)); err != nil {
		t.Fatalf("a pod at every cap: %v", err)
	}
	for _, tc := range []struct {
		name                       string
		containers, inits, volumes int
		want                       string
	}{
		{"containers", 10000, 0, 0, fmt.Sprintf("deploy.pod_template.spec.containers: 10000 containers, at most %d", maxPodContainers)},
		{"init containers", 1, maxPodInitContainers + 1, 0, fmt.Sprintf("deploy.pod_template.spec.initContainers: %d init containers, at most %d", maxPodInitContainers+1, maxPodInitContainers)},
		{"volumes", 1, 0, maxPodVolumes + 1, fmt.Sprintf("deploy.pod_template.spec.volumes: %d volumes, at most %d", maxPodVolumes+1, maxPodVolumes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(ctx, "s", spec(tc.containers, tc.inits, tc.volumes))
			if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want VALIDATION saying %q", err, tc.want)
			}
			if n := strings.Count(err.Error(), ";"); n > 0 {
				t.Errorf("error with %d more faults, want the cap alone: %.300s", n, err)
			}
		})
	}
}
