package k8s

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/warmpool/warmpool"
)

// PolicyConfig is what an operator allows a scope's pods (SPEC §11.1, the serve flags
// --pod-security, --namespaces, --image-prefixes, --max-pod-cpu, --max-pod-memory).
type PolicyConfig struct {
	// PodSecurity is the Pod Security Standards level: restricted (default), baseline
	// or privileged.
	PodSecurity string
	// Namespace is the driver's namespace (deploy.namespace left empty).
	Namespace string
	// Namespaces a scope's deploy.namespace may name; empty: Namespace alone (an empty
	// deploy.namespace, the driver's own namespace, is always allowed).
	Namespaces []string
	// ImagePrefixes, when set, are the prefixes every image of the pod must start with.
	ImagePrefixes []string
	// MaxPodCPU and MaxPodMemory, when set, cap the sum of the pod's requests (and of
	// its limits).
	MaxPodCPU, MaxPodMemory string
}

// Policy checks scope configs against a PolicyConfig before they are stored. It
// implements warmpool.DeployPolicy.
type Policy struct {
	cfg            PolicyConfig
	level          psapi.LevelVersion
	eval           policy.Evaluator
	maxCPU, maxMem *resource.Quantity
}

// NewPolicy checks cfg and returns its Policy.
func NewPolicy(cfg PolicyConfig) (*Policy, error) {
	if cfg.PodSecurity == "" {
		cfg.PodSecurity = string(psapi.LevelRestricted)
	}
	level, err := psapi.ParseLevel(cfg.PodSecurity)
	if err != nil {
		return nil, fmt.Errorf("--pod-security %q: %w", cfg.PodSecurity, err)
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, err
	}
	if len(cfg.Namespaces) == 0 && cfg.Namespace != "" {
		cfg.Namespaces = []string{cfg.Namespace}
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	p := &Policy{cfg: cfg, level: psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}, eval: eval}
	for _, m := range []struct {
		flag, v string
		dst     **resource.Quantity
	}{{"--max-pod-cpu", cfg.MaxPodCPU, &p.maxCPU}, {"--max-pod-memory", cfg.MaxPodMemory, &p.maxMem}} {
		if m.v == "" {
			continue
		}
		q, err := positiveQuantity(m.flag, m.v)
		if err != nil {
			return nil, err
		}
		*m.dst = &q
	}
	return p, nil
}

// Render is Pod for a dry run's answer.
func (p *Policy) Render(ctx context.Context, scope string, spec warmpool.DeploySpec) (any, error) {
	return p.Pod(ctx, scope, spec)
}

// Pod is the pod a spec deploys into its namespace, as the kubernetes driver would
// create it (its name and fencing number are placeholders). Errors: VALIDATION.
func (p *Policy) Pod(_ context.Context, scope string, spec warmpool.DeploySpec) (*corev1.Pod, error) {
	ns := spec.Namespace
	if ns == "" {
		ns = p.cfg.Namespace
	}
	req := warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: 1, Spec: spec}
	return newAgentPod(req, warmpool.PodName(scope, 1), ns, time.UnixMilli(0), podExtras{})
}

// Check refuses, with one VALIDATION error naming every field and rule it breaks, a
// spec whose pod breaks the policy.
func (p *Policy) Check(ctx context.Context, scope string, spec warmpool.DeploySpec) error {
	pod, err := p.Pod(ctx, scope, spec)
	if err != nil {
		return err
	}
	var faults []string
	if spec.Namespace != "" && !slices.Contains(p.cfg.Namespaces, spec.Namespace) {
		faults = append(faults, fmt.Sprintf("deploy.namespace: %q is not one of the namespaces scopes may use (%s; --namespaces)", spec.Namespace, list(p.cfg.Namespaces)))
	}
	faults = append(faults, p.images(pod, len(spec.PodTemplate) == 0)...)
	faults = append(faults, p.resources(pod)...)
	for _, r := range p.eval.EvaluatePod(p.level, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			faults = append(faults, fmt.Sprintf("%s: breaks Pod Security %q: %s (%s)", templatePath, p.level.Level, r.ForbiddenReason, r.ForbiddenDetail))
		}
	}
	if len(faults) > 0 {
		return warmpool.Errorf(warmpool.CodeValidation, "%s", strings.Join(faults, "; "))
	}
	return nil
}

// images are the faults of the pod's images against the allowed prefixes; shorthand
// says the pod has no template (its one image is deploy.image).
func (p *Policy) images(pod *corev1.Pod, shorthand bool) []string {
	if len(p.cfg.ImagePrefixes) == 0 {
		return nil
	}
	var faults []string
	check := func(kind string, cs []corev1.Container) {
		for i, c := range cs {
			ok := slices.ContainsFunc(p.cfg.ImagePrefixes, func(pre string) bool { return strings.HasPrefix(c.Image, pre) })
			field := fmt.Sprintf("%s.spec.%s[%d].image", templatePath, kind, i)
			if shorthand {
				field = "deploy.image"
			}
			if !ok {
				faults = append(faults, fmt.Sprintf("%s: %q does not start with an allowed prefix (%s)", field, c.Image, strings.Join(p.cfg.ImagePrefixes, ", ")))
			}
		}
	}
	check("initContainers", pod.Spec.InitContainers)
	check("containers", pod.Spec.Containers)
	return faults
}

// resources are the faults of the pod's cpu and memory: a zero or overflowing
// quantity, and sums over the caps.
func (p *Policy) resources(pod *corev1.Pod) []string {
	var faults []string
	for _, r := range []struct {
		name corev1.ResourceName
		max  *resource.Quantity
		flag string
	}{{corev1.ResourceCPU, p.maxCPU, "--max-pod-cpu"}, {corev1.ResourceMemory, p.maxMem, "--max-pod-memory"}} {
		var req, lim resource.Quantity
		for i, c := range pod.Spec.Containers {
			for _, l := range []struct {
				kind string
				list corev1.ResourceList
			}{{"requests", c.Resources.Requests}, {"limits", c.Resources.Limits}} {
				kind := l.kind
				q, ok := l.list[r.name]
				if !ok {
					continue
				}
				if why := quantityFault(q); why != "" {
					faults = append(faults, fmt.Sprintf("%s.spec.containers[%d].resources.%s.%s: %s", templatePath, i, kind, r.name, why))
				}
				if kind == "requests" {
					req.Add(q)
				} else {
					lim.Add(q)
				}
			}
		}
		if r.max == nil {
			continue
		}
		if req.Cmp(*r.max) > 0 {
			faults = append(faults, fmt.Sprintf("deploy: the pod requests %s %s, over %s %s", req.String(), r.name, r.flag, r.max.String()))
		}
		if lim.Cmp(*r.max) > 0 {
			faults = append(faults, fmt.Sprintf("deploy: the pod's %s limits add up to %s, over %s %s", r.name, lim.String(), r.flag, r.max.String()))
		}
	}
	return faults
}

// positiveQuantity parses a quantity as the API server does and refuses zero, a
// negative value and one too large to count in millis (apimachinery's MilliValue
// overflows to a negative number there).
func positiveQuantity(field, v string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return q, warmpool.Errorf(warmpool.CodeValidation, "%s: %v", field, err)
	}
	if why := quantityFault(q); why != "" {
		return q, warmpool.Errorf(warmpool.CodeValidation, "%s: %s", field, why)
	}
	return q, nil
}

// quantityFault says what is wrong with a cpu or memory quantity: zero or less, or too
// large to count in millis; "" when nothing is.
func quantityFault(q resource.Quantity) string {
	switch {
	case q.Sign() <= 0:
		return fmt.Sprintf("must be more than zero, got %q", q.String())
	case q.AsApproximateFloat64() >= math.MaxInt64/1000:
		return fmt.Sprintf("%q is too large", q.String())
	}
	return ""
}

// list names the allowed namespaces for a message.
func list(ns []string) string {
	if len(ns) == 0 {
		return "none but the driver's own"
	}
	return strings.Join(ns, ", ")
}
