package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/warmpool/warmpool"
)

// Annotations the kubernetes driver puts on every pod it creates, next to the labels of
// the root package. Together they carry everything reconcile needs to adopt a pod after
// Redis lost it (SPEC §7): the exact scope id (the label holds a label-safe form of it),
// the deploy_ver, the fencing number, the port, the paths and the creation time.
const (
	AnnotationScopeID    = "warmpool.io/scope-id"
	AnnotationDeployVer  = "warmpool.io/deploy-ver"
	AnnotationFence      = "warmpool.io/fence"
	AnnotationPort       = "warmpool.io/port"
	AnnotationSSEPath    = "warmpool.io/sse-path"
	AnnotationHealthPath = "warmpool.io/health-path"
	// AnnotationCreatedAt is when the driver created the pod, unix milliseconds.
	AnnotationCreatedAt = "warmpool.io/created-at"
)

// kubeMaxName is the longest pod name the driver makes: a DNS-1123 label, so it also fits
// the pod's hostname.
const kubeMaxName = validation.DNS1123LabelMaxLength

// ScopeLabelValue is the value of the warmpool.io/scope label for a scope id. Every valid
// scope id is already a valid label value ('_' and '.' are allowed there) and is used as
// is; anything else is sanitised and made unique with a hash suffix, so a label never
// fails validation. The exact id is in the AnnotationScopeID annotation.
func ScopeLabelValue(scopeID string) string {
	if len(validation.IsValidLabelValue(scopeID)) == 0 {
		return scopeID
	}
	sum := sha256.Sum256([]byte(scopeID))
	var b strings.Builder
	for _, r := range scopeID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := b.String()
	if len(base) > 48 {
		base = base[:48]
	}
	base = strings.TrimRight(strings.TrimLeft(base, "-_."), "-_.")
	if base == "" {
		return hex.EncodeToString(sum[:])[:16]
	}
	return base + "-" + hex.EncodeToString(sum[:])[:8]
}

// kubeClashName derives a fresh name from base after a genuine name clash: base cut to fit,
// a dash and five random characters.
func kubeClashName(base string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	sfx := make([]byte, 5)
	for i := range sfx {
		sfx[i] = alphabet[rand.IntN(len(alphabet))]
	}
	if len(base) > kubeMaxName-len(sfx)-1 {
		base = strings.TrimRight(base[:kubeMaxName-len(sfx)-1], "-")
	}
	return base + "-" + string(sfx)
}

// podExtras are the operator's driver-wide additions to every pod.
type podExtras struct {
	grace        time.Duration
	nodeSelector map[string]string
	annotations  map[string]string
}

// newAgentPod turns a deploy request into the pod object to create. The spec comes with
// its defaults filled (warmpool.ScopeConfig.Normalize); nothing is defaulted here.
func newAgentPod(req warmpool.DeployRequest, name, namespace string, createdAt time.Time, x podExtras) (*corev1.Pod, error) {
	s := req.Spec
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "pod name %q: %s", name, strings.Join(errs, "; "))
	}
	requests, err := shorthandResources(s)
	if err != nil {
		return nil, err
	}
	if s.Port < 1 || s.Port > 65535 {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "deploy.port: must be between 1 and 65535, got %d", s.Port)
	}
	agentEnv := req.WithAgentEnv(s.Env, name) // the scope's env and SPEC §11.2's
	env := make([]corev1.EnvVar, 0, len(agentEnv))
	for k, v := range agentEnv {
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	fence := strconv.FormatInt(req.Fence, 10)
	graceS := int64(x.grace / time.Second)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				warmpool.LabelManagedBy: warmpool.ManagedByValue,
				warmpool.LabelScope:     ScopeLabelValue(req.ScopeID),
				warmpool.LabelDeployVer: req.DeployVer,
				warmpool.LabelFence:     fence,
			},
			Annotations: map[string]string{
				AnnotationScopeID:    req.ScopeID,
				AnnotationDeployVer:  req.DeployVer,
				AnnotationFence:      fence,
				AnnotationPort:       strconv.Itoa(s.Port),
				AnnotationSSEPath:    s.SSEPath,
				AnnotationHealthPath: s.HealthPath,
				AnnotationCreatedAt:  strconv.FormatInt(warmpool.UnixMs(createdAt), 10),
			},
		},
		Spec: corev1.PodSpec{
			// Never: a pod is one agent process. If it exits, its in-memory sessions are
			// gone, so the pod turns Failed/Succeeded and PodDeath reports it, and the
			// sweeper replaces it; an in-place restart (Always) would hide that loss
			// behind a pod that looks healthy again.
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			TerminationGracePeriodSeconds: &graceS,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:      s.ContainerName,
				Image:     s.Image,
				Command:   s.Command,
				Args:      s.Args,
				Env:       env,
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: int32(s.Port), Protocol: corev1.ProtocolTCP}},
				Resources: requests,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: s.HealthPath, Port: intstr.FromInt32(int32(s.Port)), Scheme: corev1.URISchemeHTTP,
					}},
					PeriodSeconds:    2,
					TimeoutSeconds:   1,
					FailureThreshold: 3,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             new(true),
					AllowPrivilegeEscalation: new(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	for k, v := range x.annotations {
		if _, ours := pod.Annotations[k]; !ours {
			pod.Annotations[k] = v
		}
	}
	if len(x.nodeSelector) > 0 {
		pod.Spec.NodeSelector = maps.Clone(x.nodeSelector)
	}
	if len(s.PodTemplate) > 0 {
		return applyTemplate(pod, s)
	}
	return pod, nil
}

// shorthandResources are the agent container's requests and memory limit from
// deploy.resources; none when the pod template's agent container gives them. A
// quantity that is zero or too large to count in millis is refused.
func shorthandResources(s warmpool.DeploySpec) (corev1.ResourceRequirements, error) {
	if s.Resources == (warmpool.Resources{}) {
		return corev1.ResourceRequirements{}, nil
	}
	cpu, err := positiveQuantity("deploy.resources.cpu", s.Resources.CPU)
	if err != nil {
		return corev1.ResourceRequirements{}, err
	}
	mem, err := positiveQuantity("deploy.resources.memory", s.Resources.Memory)
	if err != nil {
		return corev1.ResourceRequirements{}, err
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
	}, nil
}

// kubeOwnPod reports whether p was made for this very deploy (same scope, deploy_ver and
// fencing number): an AlreadyExists on create then means our own earlier create went
// through, not that someone else holds the name.
func kubeOwnPod(p *corev1.Pod, req warmpool.DeployRequest) bool {
	l := p.Labels
	return l[warmpool.LabelManagedBy] == warmpool.ManagedByValue &&
		l[warmpool.LabelScope] == ScopeLabelValue(req.ScopeID) &&
		l[warmpool.LabelDeployVer] == req.DeployVer &&
		l[warmpool.LabelFence] == strconv.FormatInt(req.Fence, 10) &&
		(p.Annotations[AnnotationScopeID] == "" || p.Annotations[AnnotationScopeID] == req.ScopeID)
}

// kubeURL is http://ip:port + path, or "" while any part is unknown.
func kubeURL(ip string, port int, path string) string {
	if ip == "" || port < 1 || port > 65535 || !strings.HasPrefix(path, "/") {
		return ""
	}
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + path
}

// kubePod converts a Kubernetes pod to warmpool's view of it. Fields come from the
// annotations (labels as a fallback for scope, deploy_ver and fence); a pod whose
// annotations lack the port or paths, or that has no IP yet, has empty URLs, which tells
// reconcile it cannot be adopted as it is. Ready and Dead are left to the caller.
func kubePod(p *corev1.Pod) warmpool.Pod {
	a, l := p.Annotations, p.Labels
	fence, _ := strconv.ParseInt(kubeFirst(a[AnnotationFence], l[warmpool.LabelFence]), 10, 64)
	port, _ := strconv.Atoi(a[AnnotationPort])
	created, err := strconv.ParseInt(a[AnnotationCreatedAt], 10, 64)
	if err != nil {
		created = warmpool.UnixMs(p.CreationTimestamp.Time)
	}
	return warmpool.Pod{
		ID:        p.Name,
		ScopeID:   kubeFirst(a[AnnotationScopeID], l[warmpool.LabelScope]),
		DeployVer: kubeFirst(a[AnnotationDeployVer], l[warmpool.LabelDeployVer]),
		Fence:     fence,
		Namespace: p.Namespace,
		SSEURL:    kubeURL(p.Status.PodIP, port, a[AnnotationSSEPath]),
		HealthURL: kubeURL(p.Status.PodIP, port, a[AnnotationHealthPath]),
		CreatedAt: created,
	}
}

// kubeReady is Running with the Ready condition true and an IP to reach.
func kubeReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
		return false
	}
	c := kubePodCond(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

func kubePodCond(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func kubeNodeCond(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// Death reasons start with one of these words, so callers (metrics, logs) can group them.
const (
	DeathFailed    = "failed"
	DeathSucceeded = "succeeded"
	DeathDeleted   = "deleted"
	DeathEvicted   = "evicted"
	DeathNodeLost  = "node-lost"
)

// PodDeath normalises the ways a pod can be gone or never serve again into one reason
// ("" while the pod lives). The reason starts with DeathFailed, DeathSucceeded,
// DeathDeleted, DeathEvicted or DeathNodeLost, then ": " and the detail. node is the node
// the pod is bound to, nil if that node no longer exists; a pod not yet bound to a node
// ignores it. A node that is not Ready counts as lost once its Ready condition has been
// false or unknown for grace.
func PodDeath(pod *corev1.Pod, node *corev1.Node, now time.Time, grace time.Duration) string {
	return kubePodDeath(pod, node, true, now, grace)
}

// kubePodDeath is PodDeath with nodeKnown=false meaning "node state unknown" (no node
// informer, e.g. RBAC forbids it): then only the pod's own status counts.
func kubePodDeath(pod *corev1.Pod, node *corev1.Node, nodeKnown bool, now time.Time, grace time.Duration) string {
	if pod == nil {
		return DeathDeleted + ": pod is gone"
	}
	st := pod.Status
	switch {
	case pod.DeletionTimestamp != nil:
		return DeathDeleted + ": pod is terminating"
	case st.Phase == corev1.PodFailed && st.Reason == "Evicted":
		return DeathEvicted + ": " + kubeFirst(st.Message, "evicted by the kubelet")
	case st.Phase == corev1.PodFailed:
		return DeathFailed + ": " + kubeFirst(kubeTerminated(pod), kubeJoin(st.Reason, st.Message), "pod phase Failed")
	case st.Phase == corev1.PodSucceeded:
		return DeathSucceeded + ": the agent exited with status 0"
	}
	if c := kubePodCond(pod, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue {
		return DeathEvicted + ": " + kubeJoin(c.Reason, c.Message)
	}
	if !nodeKnown || pod.Spec.NodeName == "" {
		return ""
	}
	nn := pod.Spec.NodeName
	switch {
	case node == nil:
		return DeathNodeLost + ": node " + nn + " is gone"
	case node.DeletionTimestamp != nil:
		return DeathNodeLost + ": node " + nn + " is being deleted"
	}
	if c := kubeNodeCond(node, corev1.NodeReady); c != nil && c.Status != corev1.ConditionTrue {
		if since := c.LastTransitionTime.Time; !since.IsZero() && now.Sub(since) >= grace {
			return fmt.Sprintf("%s: node %s Ready=%s for %s", DeathNodeLost, nn, c.Status, now.Sub(since).Round(time.Second))
		}
	}
	return ""
}

// kubeTerminated describes the kubeFirst terminated container, "" if none.
func kubeTerminated(p *corev1.Pod) string {
	for _, cs := range kubeStatuses(p) {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("container %s terminated (%s, exit code %d)%s", cs.Name, kubeFirst(t.Reason, "no reason"), t.ExitCode, kubeMsg(t.Message))
		}
	}
	return ""
}

func kubeStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(p.Status.InitContainerStatuses)+len(p.Status.ContainerStatuses))
	out = append(out, p.Status.InitContainerStatuses...)
	return append(out, p.Status.ContainerStatuses...)
}

func kubeFirst(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func kubeJoin(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ": " + b
}

func kubeMsg(msg string) string {
	if msg == "" {
		return ""
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return ": " + msg
}
