package k8s

import (
	"context"
	"errors"
	"strings"

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
		return warmpool.Errorf(warmpool.CodeValidation, "deploy: the cluster refuses the pod: %s", serverMessage(err))
	}
	return warmpool.Errorf(warmpool.CodeStoreUnavailable, "deploy: the cluster's dry run did not answer: %s", serverMessage(err)).Retry(1)
}

// serverMessage is an API server error's own message, without the URL of the request
// (which names the internal API server address).
func serverMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		if m := s.Status().Message; m != "" {
			return m
		}
	}
	msg := err.Error()
	if i := strings.Index(msg, "https://"); i >= 0 {
		return strings.TrimSpace(msg[:i]) + " (the API server)"
	}
	return msg
}
