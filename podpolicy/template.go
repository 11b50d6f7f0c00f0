package podpolicy

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/warmpool/warmpool"
)

// templatePath is where a scope config holds its pod template, for error messages.
const templatePath = "deploy.pod_template"

// decodeTemplate decodes a scope's pod template with Kubernetes' own types, strictly:
// an unknown or repeated field is a VALIDATION error naming its path, a quantity is
// parsed as the API server parses it.
func decodeTemplate(raw []byte) (corev1.PodTemplateSpec, error) {
	var t corev1.PodTemplateSpec
	strict, err := sigsjson.UnmarshalStrict(raw, &t, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return t, warmpool.Errorf(warmpool.CodeValidation, "%s: %s", templatePath, strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = templateFault(e.Error())
		}
		return t, warmpool.Errorf(warmpool.CodeValidation, "%s", strings.Join(msgs, "; "))
	}
	return t, nil
}

// templateFault words one strict-decoding error of the template with its full path:
// `unknown field "spec.tolerations[0].efect"` becomes
// `deploy.pod_template.spec.tolerations[0].efect: unknown field`.
func templateFault(msg string) string {
	for _, kind := range []string{"unknown field", "duplicate field"} {
		if f, ok := strings.CutPrefix(msg, kind+" "); ok {
			return templatePath + "." + strings.Trim(f, `"`) + ": " + kind
		}
	}
	return templatePath + ": " + msg
}

// applyTemplate builds the pod of a spec with a template: the template's metadata and
// spec, with what warmpool owns laid over it (its labels, annotations, restart policy,
// the agent container's port and the env it is told) and what the template leaves
// unset filled from base (the pod warmpool builds without a template: the shorthand's
// image, command, args, env, resources, the readiness probe and the hardened
// defaults).
func applyTemplate(base *corev1.Pod, spec warmpool.DeploySpec) (*corev1.Pod, error) {
	t, err := decodeTemplate(spec.PodTemplate)
	if err != nil {
		return nil, err
	}
	agent := -1
	for i, c := range t.Spec.Containers {
		if c.Name == spec.ContainerName {
			agent = i
		}
	}
	if agent < 0 {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "%s.spec.containers: no container named %q (deploy.container_name)", templatePath, spec.ContainerName)
	}
	pod := base.DeepCopy()
	pod.Labels = merged(t.Labels, base.Labels)
	pod.Annotations = merged(t.Annotations, base.Annotations)
	ps := t.Spec
	bs := base.Spec
	ps.RestartPolicy = corev1.RestartPolicyNever
	ps.AutomountServiceAccountToken = first(ps.AutomountServiceAccountToken, bs.AutomountServiceAccountToken)
	ps.EnableServiceLinks = first(ps.EnableServiceLinks, bs.EnableServiceLinks)
	ps.TerminationGracePeriodSeconds = first(ps.TerminationGracePeriodSeconds, bs.TerminationGracePeriodSeconds)
	if len(bs.NodeSelector) > 0 {
		ps.NodeSelector = merged(ps.NodeSelector, bs.NodeSelector)
	}
	if ps.SecurityContext == nil {
		ps.SecurityContext = &corev1.PodSecurityContext{}
	}
	ps.SecurityContext.RunAsNonRoot = first(ps.SecurityContext.RunAsNonRoot, bs.SecurityContext.RunAsNonRoot)
	if ps.SecurityContext.SeccompProfile == nil {
		ps.SecurityContext.SeccompProfile = bs.SecurityContext.SeccompProfile
	}
	ours := bs.Containers[0]
	c := &ps.Containers[agent]
	if c.Image == "" {
		c.Image = ours.Image
	}
	if c.Command == nil {
		c.Command = ours.Command
	}
	if c.Args == nil {
		c.Args = ours.Args
	}
	c.Env = append(c.Env, ours.Env...)
	if c.Resources.Requests == nil && c.Resources.Limits == nil && c.Resources.Claims == nil {
		c.Resources = ours.Resources
	}
	c.Ports = append(withoutPort(c.Ports, ours.Ports[0]), ours.Ports[0])
	if c.ReadinessProbe == nil {
		c.ReadinessProbe = ours.ReadinessProbe
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = ours.TerminationMessagePolicy
	}
	for i := range ps.InitContainers {
		harden(&ps.InitContainers[i], ours.SecurityContext)
	}
	for i := range ps.Containers {
		harden(&ps.Containers[i], ours.SecurityContext)
	}
	pod.Spec = ps
	return pod, nil
}

// harden fills what a container's securityContext leaves unset from the hardened one.
func harden(c *corev1.Container, h *corev1.SecurityContext) {
	if c.SecurityContext == nil {
		c.SecurityContext = h.DeepCopy()
		return
	}
	sc := c.SecurityContext
	sc.AllowPrivilegeEscalation = first(sc.AllowPrivilegeEscalation, h.AllowPrivilegeEscalation)
	if sc.Capabilities == nil {
		sc.Capabilities = h.Capabilities.DeepCopy()
	}
	if sc.SeccompProfile == nil && sc.Privileged == nil {
		sc.SeccompProfile = h.SeccompProfile.DeepCopy()
	}
}

// withoutPort drops the ports that would clash with warmpool's own (its name or its
// number): the agent's http port is deploy.port.
func withoutPort(ports []corev1.ContainerPort, own corev1.ContainerPort) []corev1.ContainerPort {
	out := ports[:0:0]
	for _, p := range ports {
		if p.Name != own.Name && p.ContainerPort != own.ContainerPort {
			out = append(out, p)
		}
	}
	return out
}

// merged is a copy of theirs with ours laid over it.
func merged(theirs, ours map[string]string) map[string]string {
	out := make(map[string]string, len(theirs)+len(ours))
	maps.Copy(out, theirs)
	maps.Copy(out, ours)
	return out
}

// first is a when it is set, else b.
func first[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
