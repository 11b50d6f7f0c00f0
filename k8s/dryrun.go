package k8s

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
)

// DryRun asks the API server whether it would create the pod of spec (SPEC §11.1): the
// pod is rendered as Deploy renders it and created with dryRun=All, so admission,
// quotas, the runtime class and the service account are checked and nothing is made.
// What the server refuses is VALIDATION with its own message; a server that cannot be
// reached is STORE_UNAVAILABLE (the PUT is retried, nothing is stored).
func (k *Kubernetes) DryRun(ctx context.Context, scope string, spec warmpool.DeploySpec) error {
	ns := k.namespace(spec.Namespace)
	req := warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: 1, Spec: spec}
	pod, err := newAgentPod(req, warmpool.PodName(scope, 1), ns, k.cfg.Clock.Now(), podExtras{
		grace: k.cfg.DeleteGrace, nodeSelector: k.cfg.NodeSelector, annotations: k.cfg.PodAnnotations})
	if err != nil {
		return err
	}
	err = k.call(ctx, func(ctx context.Context) error {
		_, err := k.client.Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err), apierrors.IsNotFound(err):
		return warmpool.Errorf(warmpool.CodeValidation, "deploy: the cluster refuses the pod: %s", apiMessage(err))
	}
	return warmpool.Errorf(warmpool.CodeStoreUnavailable, "deploy: the cluster's dry run did not answer: %s", apiMessage(err)).Retry(1)
}
