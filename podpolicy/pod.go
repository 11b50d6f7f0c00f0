package podpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
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

// Annotations every agent pod carries (AgentPod puts them there), next to the labels of
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

// Extras are the operator's driver-wide additions to every pod (the kubernetes
// driver's settings); the policy renders without them.
type Extras struct {
	// Grace is the pod's termination grace period.
	Grace time.Duration
	// NodeSelector, when set, is put on the pod.
	NodeSelector map[string]string
	// Annotations are added to the pod's; they never override warmpool's own.
	Annotations map[string]string
}

// AgentPod is the pod a deploy request makes, named name in namespace: the one rendering
// of a scope's pod, which the kubernetes driver creates (and dry-runs) and the Policy
// checks. The spec comes with its defaults filled (warmpool.ScopeConfig.Normalize);
// nothing is defaulted here. Errors: VALIDATION.
func AgentPod(req warmpool.DeployRequest, name, namespace string, createdAt time.Time, x Extras) (*corev1.Pod, error) {
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
	graceS := int64(x.Grace / time.Second)
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
	for k, v := range x.Annotations {
		if _, ours := pod.Annotations[k]; !ours {
			pod.Annotations[k] = v
		}
	}
	if len(x.NodeSelector) > 0 {
		pod.Spec.NodeSelector = maps.Clone(x.NodeSelector)
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
