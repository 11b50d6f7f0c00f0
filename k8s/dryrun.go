package k8s

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/podpolicy"
)

// DryRun asks the API server whether it would create the pod of spec (SPEC §11.1): the
// pod is rendered by the function Deploy renders with (render), as the first deploy of
// the scope would create it, and created with dryRun=All, so admission, quotas, the
// runtime class and the service account are checked and nothing is made. It answers
// that pod (*corev1.Pod). What the server refuses is VALIDATION with its own message; a
// server that cannot be reached is STORE_UNAVAILABLE (the PUT is retried, nothing is
// stored).
func (k *Kubernetes) DryRun(ctx context.Context, scope string, spec warmpool.DeploySpec) (any, error) {
	ns := k.namespace(spec.Namespace)
	req := warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: 1, Spec: spec}
	pod, err := k.render(req, warmpool.PodName(scope, req.Fence), ns)
	if err != nil {
		return nil, err
	}
	err = k.call(ctx, func(ctx context.Context) error {
		_, err := k.client.Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return pod, nil
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err), apierrors.IsNotFound(err):
		return nil, warmpool.Errorf(warmpool.CodeValidation, "deploy: the cluster refuses the pod: %s", apiMessage(err))
	}
	return nil, warmpool.Errorf(warmpool.CodeStoreUnavailable, "deploy: the cluster's dry run did not answer: %s", apiMessage(err)).Retry(1)
}

// render is the pod a deploy of req creates as name in ns: the scope's spec rendered
// by podpolicy (the pod the deploy policy checks) with the driver's own additions
// (termination grace, node selector, annotations). Deploy and DryRun both build their
// pods here, so a dry run answers what a deploy creates.
func (k *Kubernetes) render(req warmpool.DeployRequest, name, ns string) (*corev1.Pod, error) {
	return podpolicy.AgentPod(req, name, ns, k.cfg.Clock.Now(), podpolicy.Extras{
		Grace: k.cfg.DeleteGrace, NodeSelector: k.cfg.NodeSelector, Annotations: k.cfg.PodAnnotations})
}
