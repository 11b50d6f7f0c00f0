package deploy

import (
	"cmp"
	"context"
	"net"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/podpolicy"
)

// endpoint is one side of a connection a NetworkPolicy judges: a pod (its namespace,
// that namespace's labels, its own labels and its named ports) or, with ip set, an
// address outside the cluster's pods.
type endpoint struct {
	what      string
	ns        string
	nsLabels  map[string]string
	podLabels map[string]string
	ports     map[string]int32
	ip        string
}

// podIn is a pod with labels in namespace ns, which carries the label the API server
// gives every namespace (kubernetes.io/metadata.name) and nsLabels.
func podIn(what, ns string, nsLabels, podLabels map[string]string, ports map[string]int32) endpoint {
	l := map[string]string{corev1.LabelMetadataName: ns}
	for k, v := range nsLabels {
		l[k] = v
	}
	return endpoint{what: what, ns: ns, nsLabels: l, podLabels: podLabels, ports: ports}
}

// conn is a connection to port (a number and a protocol) of its destination.
type conn struct {
	port  int32
	proto corev1.Protocol
}

func tcp(p int32) conn { return conn{p, corev1.ProtocolTCP} }
func udp(p int32) conn { return conn{p, corev1.ProtocolUDP} }

// allows says whether np, which selects pod, lets the connection through: from peer
// to pod's port c (ingress) or from pod to peer's port c (egress), with Kubernetes'
// rules (a peer with a pod selector alone is in np's namespace; a rule without peers
// or ports allows any; a named port is the destination pod's).
func allows(np *networkingv1.NetworkPolicy, ingress bool, pod, peer endpoint, c conn) bool {
	dst := peer
	if ingress {
		dst = pod
	}
	type rule struct {
		peers []networkingv1.NetworkPolicyPeer
		ports []networkingv1.NetworkPolicyPort
	}
	var rules []rule
	if ingress {
		for _, r := range np.Spec.Ingress {
			rules = append(rules, rule{r.From, r.Ports})
		}
	} else {
		for _, r := range np.Spec.Egress {
			rules = append(rules, rule{r.To, r.Ports})
		}
	}
	for _, r := range rules {
		peerOK := len(r.peers) == 0 || slices.ContainsFunc(r.peers, func(p networkingv1.NetworkPolicyPeer) bool {
			return peerMatches(p, np.Namespace, peer)
		})
		portOK := len(r.ports) == 0 || slices.ContainsFunc(r.ports, func(p networkingv1.NetworkPolicyPort) bool {
			return portMatches(p, dst, c)
		})
		if peerOK && portOK {
			return true
		}
	}
	return false
}

func peerMatches(p networkingv1.NetworkPolicyPeer, policyNS string, e endpoint) bool {
	if p.IPBlock != nil {
		_, cidr, err := net.ParseCIDR(p.IPBlock.CIDR)
		ip := net.ParseIP(e.ip)
		if err != nil || ip == nil || !cidr.Contains(ip) {
			return false
		}
		return !slices.ContainsFunc(p.IPBlock.Except, func(ex string) bool {
			_, n, err := net.ParseCIDR(ex)
			return err == nil && n.Contains(ip)
		})
	}
	if e.ip != "" {
		return false
	}
	if p.NamespaceSelector == nil {
		if e.ns != policyNS {
			return false
		}
	} else if !selects(p.NamespaceSelector, e.nsLabels) {
		return false
	}
	return p.PodSelector == nil || selects(p.PodSelector, e.podLabels)
}

func portMatches(p networkingv1.NetworkPolicyPort, dst endpoint, c conn) bool {
	proto := corev1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	if proto != c.proto {
		return false
	}
	switch {
	case p.Port == nil:
		return true
	case p.Port.Type == intstr.String:
		n, ok := dst.ports[p.Port.StrVal]
		return ok && n == c.port
	case p.EndPort != nil:
		return c.port >= p.Port.IntVal && c.port <= *p.EndPort
	}
	return p.Port.IntVal == c.port
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

// agentPod is the pod the kubernetes driver creates for the default scope config in
// namespace ns, as warmpool renders it.
func agentPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	p, err := podpolicy.New(podpolicy.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := p.Pod(context.Background(), "s", warmpool.DefaultScopeConfig().Deploy)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// namedPorts are a pod's container ports by name.
func namedPorts(pod corev1.PodSpec) map[string]int32 {
	out := map[string]int32{}
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			if p.Name != "" {
				out[p.Name] = p.ContainerPort
			}
		}
	}
	return out
}

// checkNetworkPolicies: the NetworkPolicy of warmpool's namespace selects the replicas
// (and no agent pod) and lets in the gateways, Prometheus and the agents' reports, and
// out Redis, PostgreSQL, the API server, the agent pods and DNS; the one of the agents'
// namespace selects every agent pod and lets in warmpool and the gateways on the agent
// port, and out the reports and DNS; nothing else either way.
func checkNetworkPolicies(t *testing.T, r rendered) {
	t.Helper()
	ns, agentsNS := r.dep.Namespace, r.role.Namespace
	var server, agents *networkingv1.NetworkPolicy
	for _, np := range r.netpols {
		switch np.Namespace {
		case ns:
			server = np
		case agentsNS:
			agents = np
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Errorf("NetworkPolicy %s/%s has policyTypes %v: want both Ingress and Egress held", np.Namespace, np.Name, np.Spec.PolicyTypes)
		}
	}
	if len(r.netpols) != 2 || server == nil || agents == nil {
		t.Fatalf("NetworkPolicies %v: want one in %s and one in %s", r.netpols, ns, agentsNS)
	}
	nsLabels := func(name string) map[string]string {
		if n := r.namespaces[name]; n != nil {
			return n.Labels
		}
		return nil
	}
	agentSpec := agentPod(t, agentsNS)
	replica := podIn("a replica", ns, nsLabels(ns), r.dep.Spec.Template.Labels, namedPorts(r.dep.Spec.Template.Spec))
	agent := podIn("an agent pod", agentsNS, nsLabels(agentsNS), agentSpec.Labels, namedPorts(agentSpec.Spec))
	gateway := podIn("a gateway", "gateways", nil, map[string]string{"warmpool.io/gateway": "true"}, nil)
	prometheus := podIn("Prometheus", "monitoring", nil, map[string]string{"app.kubernetes.io/name": "prometheus"}, nil)
	stranger := podIn("an unlabelled pod", "default", nil, map[string]string{"app": "other"}, nil)
	dns := podIn("kube-dns", "kube-system", nil, map[string]string{"k8s-app": "kube-dns"}, nil)
	outside := endpoint{what: "an outside address", ip: "203.0.113.7"}
	http, agentHTTP := replica.ports["http"], agent.ports["http"]
	if http == 0 || agentHTTP == 0 {
		t.Fatalf("the replica's ports %v and the agent pod's %v: want each an http port", replica.ports, agent.ports)
	}
	// Prometheus scrapes the metrics port when the replicas have one (--metrics-listen),
	// else the API port; gateways call the E2B port when there is one (--e2b-listen).
	scrape, e2b := cmp.Or(replica.ports["metrics"], http), replica.ports["e2b"]

	for _, s := range []struct {
		np       *networkingv1.NetworkPolicy
		pod, not endpoint
	}{{server, replica, agent}, {agents, agent, replica}} {
		if !selects(&s.np.Spec.PodSelector, s.pod.podLabels) || (s.np.Namespace == s.not.ns && selects(&s.np.Spec.PodSelector, s.not.podLabels)) {
			t.Errorf("NetworkPolicy %s selects %v: want %s and not %s", s.np.Name, s.np.Spec.PodSelector, s.pod.what, s.not.what)
		}
	}
	type judged struct {
		np      *networkingv1.NetworkPolicy
		ingress bool
		pod     endpoint
		peer    endpoint
		c       conn
		want    bool
	}
	var ports []judged
	if scrape != http {
		ports = append(ports, judged{server, true, replica, prometheus, tcp(http), false}, judged{server, true, replica, gateway, tcp(scrape), false})
	}
	if e2b != 0 {
		ports = append(ports, judged{server, true, replica, gateway, tcp(e2b), true},
			judged{server, true, replica, stranger, tcp(e2b), false}, judged{server, true, replica, agent, tcp(e2b), false})
	}
	for _, tc := range append(ports, []judged{
		{server, true, replica, gateway, tcp(http), true},
		{server, true, replica, prometheus, tcp(scrape), true},
		{server, true, replica, agent, tcp(http), true},
		{server, true, replica, stranger, tcp(http), false},
		{server, true, replica, gateway, tcp(9999), false},
		{server, false, replica, outside, tcp(6379), true},
		{server, false, replica, outside, tcp(5432), true},
		{server, false, replica, outside, tcp(443), true},
		{server, false, replica, outside, tcp(6443), true},
		{server, false, replica, agent, tcp(agentHTTP), true},
		{server, false, replica, dns, udp(53), true},
		{server, false, replica, dns, tcp(53), true},
		{server, false, replica, outside, tcp(80), false},
		{server, false, replica, outside, udp(53), false},
		{server, false, replica, stranger, tcp(8080), false},

		{agents, true, agent, replica, tcp(agentHTTP), true},
		{agents, true, agent, gateway, tcp(agentHTTP), true},
		{agents, true, agent, agent, tcp(agentHTTP), false},
		{agents, true, agent, stranger, tcp(agentHTTP), false},
		{agents, true, agent, prometheus, tcp(agentHTTP), false},
		{agents, true, agent, replica, tcp(9999), false},
		{agents, false, agent, replica, tcp(http), true},
		{agents, false, agent, dns, udp(53), true},
		{agents, false, agent, dns, tcp(53), true},
		{agents, false, agent, outside, tcp(443), false},
		{agents, false, agent, outside, tcp(6379), false},
		{agents, false, agent, outside, tcp(5432), false},
		{agents, false, agent, agent, tcp(agentHTTP), false},
		{agents, false, agent, replica, tcp(9999), false},
		{agents, false, agent, stranger, udp(53), false},
	}...) {
		if got := allows(tc.np, tc.ingress, tc.pod, tc.peer, tc.c); got != tc.want {
			dir := "from " + tc.peer.what + " to " + tc.pod.what
			if !tc.ingress {
				dir = "from " + tc.pod.what + " to " + tc.peer.what
			}
			t.Errorf("NetworkPolicy %s: %s port %d/%s allowed %v, want %v", tc.np.Name, dir, tc.c.port, tc.c.proto, got, tc.want)
		}
	}
}
