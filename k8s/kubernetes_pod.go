package k8s

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/podpolicy"
)

// kubeMaxName is the longest pod name the driver makes: a DNS-1123 label, so it also fits
// the pod's hostname.
const kubeMaxName = validation.DNS1123LabelMaxLength

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

// kubeOwnPod reports whether p was made for this very deploy (same scope, deploy_ver and
// fencing number): an AlreadyExists on create then means our own earlier create went
// through, not that someone else holds the name.
func kubeOwnPod(p *corev1.Pod, req warmpool.DeployRequest) bool {
	l := p.Labels
	return l[warmpool.LabelManagedBy] == warmpool.ManagedByValue &&
		l[warmpool.LabelScope] == podpolicy.ScopeLabelValue(req.ScopeID) &&
		l[warmpool.LabelDeployVer] == req.DeployVer &&
		l[warmpool.LabelFence] == strconv.FormatInt(req.Fence, 10) &&
		(p.Annotations[podpolicy.AnnotationScopeID] == "" || p.Annotations[podpolicy.AnnotationScopeID] == req.ScopeID)
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
	fence, _ := strconv.ParseInt(kubeFirst(a[podpolicy.AnnotationFence], l[warmpool.LabelFence]), 10, 64)
	port, _ := strconv.Atoi(a[podpolicy.AnnotationPort])
	created, err := strconv.ParseInt(a[podpolicy.AnnotationCreatedAt], 10, 64)
	if err != nil {
		created = warmpool.UnixMs(p.CreationTimestamp.Time)
	}
	return warmpool.Pod{
		ID:        p.Name,
		ScopeID:   kubeFirst(a[podpolicy.AnnotationScopeID], l[warmpool.LabelScope]),
		DeployVer: kubeFirst(a[podpolicy.AnnotationDeployVer], l[warmpool.LabelDeployVer]),
		Fence:     fence,
		Namespace: p.Namespace,
		SSEURL:    kubeURL(p.Status.PodIP, port, a[podpolicy.AnnotationSSEPath]),
		HealthURL: kubeURL(p.Status.PodIP, port, a[podpolicy.AnnotationHealthPath]),
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
