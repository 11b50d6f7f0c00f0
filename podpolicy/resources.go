package podpolicy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// resources are the faults of the pod's cpu and memory: a zero or overflowing quantity
// wherever the pod sets one, and requests or limits over the caps.
func (p *Policy) resources(pod *corev1.Pod) []string {
	var faults []string
	for _, r := range []struct {
		name corev1.ResourceName
		max  *resource.Quantity
		flag string
	}{{corev1.ResourceCPU, p.maxCPU, "--max-pod-cpu"}, {corev1.ResourceMemory, p.maxMem, "--max-pod-memory"}} {
		for _, l := range resourceLists(&pod.Spec) {
			if q, ok := l.list[r.name]; ok {
				if why := quantityFault(q); why != "" {
					faults = append(faults, fmt.Sprintf("%s.spec.%s.%s: %s", templatePath, l.path, r.name, why))
				}
			}
		}
		if r.max == nil {
			continue
		}
		if req := effectiveUse(&pod.Spec, r.name, false); req.total.Cmp(*r.max) > 0 {
			faults = append(faults, fmt.Sprintf("deploy: the pod requests %s %s, over %s %s (%s)", req.total.String(), r.name, r.flag, r.max.String(), req))
		}
		if lim := effectiveUse(&pod.Spec, r.name, true); lim.total.Cmp(*r.max) > 0 {
			faults = append(faults, fmt.Sprintf("deploy: the pod's %s limits add up to %s, over %s %s (%s)", r.name, lim.total.String(), r.flag, r.max.String(), lim))
		}
	}
	return faults
}

// resourceList is one place a pod spec sets resources, by its path under spec.
type resourceList struct {
	path string
	list corev1.ResourceList
}

// resourceLists are every place a pod spec sets resources: its containers' and init
// containers' requests and limits, the pod-level ones and the overhead.
func resourceLists(spec *corev1.PodSpec) []resourceList {
	var out []resourceList
	add := func(path string, r corev1.ResourceRequirements) {
		out = append(out, resourceList{path + ".requests", r.Requests}, resourceList{path + ".limits", r.Limits})
	}
	for i, c := range spec.InitContainers {
		add(fmt.Sprintf("initContainers[%d].resources", i), c.Resources)
	}
	for i, c := range spec.Containers {
		add(fmt.Sprintf("containers[%d].resources", i), c.Resources)
	}
	if spec.Resources != nil {
		add("resources", *spec.Resources)
	}
	return append(out, resourceList{"overhead", spec.Overhead})
}

// podUse is what a pod takes of one resource, and the parts it is made of.
type podUse struct {
	// containers is the regular containers with the sidecars (init containers with
	// restartPolicy Always), which run beside them.
	containers resource.Quantity
	// initPeak is the most any init container takes while it runs, with the sidecars
	// started before it.
	initPeak resource.Quantity
	// podLevel is spec.resources' value (zero when unset).
	podLevel resource.Quantity
	// overhead is what spec.overhead adds.
	overhead resource.Quantity
	// total is what the pod takes.
	total resource.Quantity
}

// String names the parts of the use for a refusal.
func (u podUse) String() string {
	parts := []string{"containers and sidecars " + u.containers.String()}
	for _, p := range []struct {
		what string
		q    resource.Quantity
	}{{"init containers at most", u.initPeak}, {"spec.resources", u.podLevel}, {"spec.overhead", u.overhead}} {
		if !p.q.IsZero() {
			parts = append(parts, p.what+" "+p.q.String())
		}
	}
	return strings.Join(parts, ", ")
}

// effectiveUse is what a pod takes of name, its requests (limits false) or its
// limits, counted as Kubernetes counts them (k8s.io/component-helpers/resource's
// PodRequests and PodLimits, which the scheduler and the kubelet use, after the API
// server's defaulting):
//   - a container that sets a limit and no request requests its limit;
//   - init containers run one at a time before the containers, each beside the sidecars
//     started before it, and the sidecars keep running beside the containers: the pod
//     takes the larger of the containers with the sidecars and the init containers' peak;
//   - pod-level resources (spec.resources) stand for the containers' when set: the API
//     server refuses pod-level values below the containers', so the larger of the two
//     is what the cluster counts, and what a pod could take where no API server checks it;
//   - spec.overhead adds to the requests, and to a limit that is set.
func effectiveUse(spec *corev1.PodSpec, name corev1.ResourceName, limits bool) podUse {
	of := func(r corev1.ResourceRequirements) resource.Quantity {
		q, ok := r.Limits[name]
		if !limits {
			if req, set := r.Requests[name]; set || !ok {
				q = req
			}
		}
		return q.DeepCopy()
	}
	var u podUse
	var sidecars resource.Quantity
	for _, c := range spec.Containers {
		u.containers.Add(of(c.Resources))
	}
	for _, c := range spec.InitContainers {
		q := of(c.Resources)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			u.containers.Add(q)
			sidecars.Add(q)
			q = sidecars.DeepCopy()
		} else {
			q.Add(sidecars)
		}
		u.initPeak = larger(u.initPeak, q)
	}
	u.total = larger(u.containers, u.initPeak)
	if spec.Resources != nil {
		u.podLevel = of(*spec.Resources)
		u.total = larger(u.total, u.podLevel)
	}
	if o, ok := spec.Overhead[name]; ok && (!limits || !u.total.IsZero()) {
		u.overhead = o.DeepCopy()
		u.total.Add(o)
	}
	return u
}

// larger is a copy of the larger of a and b.
func larger(a, b resource.Quantity) resource.Quantity {
	if b.Cmp(a) > 0 {
		return b.DeepCopy()
	}
	return a.DeepCopy()
}
