package podpolicy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/warmpool/warmpool"
)

// DefaultNamespace is Kubernetes' own default namespace: a scope's pod goes there when
// neither its deploy.namespace nor the driver names one.
const DefaultNamespace = metav1.NamespaceDefault

// Config is what an operator allows a scope's pods (SPEC §11.1, the serve flags
// --pod-security, --namespaces, --image-prefixes, --max-pod-cpu, --max-pod-memory).
type Config struct {
	// PodSecurity is the Pod Security Standards level: restricted (default), baseline
	// or privileged.
	PodSecurity string
	// Namespace is the driver's namespace (deploy.namespace left empty; "":
	// DefaultNamespace).
	Namespace string
	// Namespaces a scope's deploy.namespace may name; empty: Namespace alone (an empty
	// deploy.namespace, the driver's own namespace, is always allowed).
	Namespaces []string
	// ImagePrefixes, when set, are the prefixes every image of the pod must start with
	// (containers, init containers, image volumes).
	ImagePrefixes []string
	// MaxPodCPU and MaxPodMemory, when set, cap the pod's requests (and its limits) as
	// the scheduler counts them: init containers, sidecars, pod-level resources and
	// overhead included (effectiveUse).
	MaxPodCPU, MaxPodMemory string
}

// The most containers, init containers and volumes a scope's pod may have. Kubernetes
// sets no number, but each one costs the policy check, the render, the dry run and the
// kubelet, and an agent pod needs a handful: the agent, a few sidecars, their mounts.
const (
	maxPodContainers     = 16
	maxPodInitContainers = 16
	maxPodVolumes        = 64
)

// Policy checks scope configs against a Config before they are stored. It
// implements warmpool.DeployPolicy.
type Policy struct {
	cfg            Config
	level          psapi.LevelVersion
	eval           policy.Evaluator
	maxCPU, maxMem *resource.Quantity
}

// New checks cfg and returns its Policy.
func New(cfg Config) (*Policy, error) {
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
// create it (AgentPod, without the driver's Extras; its name and fencing number are
// placeholders). Errors: VALIDATION.
func (p *Policy) Pod(_ context.Context, scope string, spec warmpool.DeploySpec) (*corev1.Pod, error) {
	ns := spec.Namespace
	if ns == "" {
		ns = p.cfg.Namespace
	}
	req := warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: 1, Spec: spec}
	return AgentPod(req, warmpool.PodName(scope, 1), ns, time.UnixMilli(0), Extras{})
}

// Check refuses, with one VALIDATION error naming every field and rule it breaks, a
// spec whose pod breaks the policy.
func (p *Policy) Check(ctx context.Context, scope string, spec warmpool.DeploySpec) error {
	pod, err := p.Pod(ctx, scope, spec)
	if err != nil {
		return err
	}
	if faults := shape(&pod.Spec); len(faults) > 0 {
		return warmpool.Errorf(warmpool.CodeValidation, "%s", strings.Join(faults, "; "))
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

// shape refuses what a pod may not hold: more containers, init containers or volumes
// than the caps (once a list, before anything checks its items), and ephemeral
// containers, which the API server refuses in a pod's create (they join a running pod
// through its ephemeralcontainers subresource) and which would otherwise run an image
// no other check sees.
func shape(spec *corev1.PodSpec) []string {
	var faults []string
	for _, l := range []struct {
		field, what string
		n, max      int
	}{
		{"containers", "containers", len(spec.Containers), maxPodContainers},
		{"initContainers", "init containers", len(spec.InitContainers), maxPodInitContainers},
		{"volumes", "volumes", len(spec.Volumes), maxPodVolumes},
	} {
		if l.n > l.max {
			faults = append(faults, fmt.Sprintf("%s.spec.%s: %d %s, at most %d", templatePath, l.field, l.n, l.what, l.max))
		}
	}
	if len(spec.EphemeralContainers) > 0 {
		faults = append(faults, fmt.Sprintf("%s.spec.ephemeralContainers: Kubernetes refuses them in a pod's create: leave them out", templatePath))
	}
	return faults
}

// images are the faults of the pod's images against the allowed prefixes: every place
// a pod names one, its containers', its init containers' and its image volumes'
// (ephemeral containers are refused by shape). shorthand says the pod has no template
// (its one image is deploy.image).
func (p *Policy) images(pod *corev1.Pod, shorthand bool) []string {
	if len(p.cfg.ImagePrefixes) == 0 {
		return nil
	}
	var faults []string
	check := func(field, image string) {
		if shorthand {
			field = "deploy.image"
		}
		if !slices.ContainsFunc(p.cfg.ImagePrefixes, func(pre string) bool { return strings.HasPrefix(image, pre) }) {
			faults = append(faults, fmt.Sprintf("%s: %q does not start with an allowed prefix (%s)", field, image, strings.Join(p.cfg.ImagePrefixes, ", ")))
		}
	}
	for _, l := range []struct {
		kind string
		cs   []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range l.cs {
			check(fmt.Sprintf("%s.spec.%s[%d].image", templatePath, l.kind, i), c.Image)
		}
	}
	for i, v := range pod.Spec.Volumes {
		if v.Image != nil {
			check(fmt.Sprintf("%s.spec.volumes[%d].image.reference", templatePath, i), v.Image.Reference)
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
