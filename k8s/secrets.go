package k8s

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
)

var _ warmpool.SecretReader = (*Kubernetes)(nil)

// ReadSecret reads key of the Secret named secret in the pod's namespace (the
// scope's), with warmpool's own RBAC (get on secrets there): a session config's secret
// refs are resolved so when the pod's agent fetches the config, never by the gateway,
// and the value goes nowhere but that answer. Errors: VALIDATION for a secret or key
// there is not, or one warmpool may not read (the message names them, never a
// value); the API server's other errors.
func (k *Kubernetes) ReadSecret(ctx context.Context, pod warmpool.Pod, secret, key string) (string, error) {
	ns := k.namespace(pod.Namespace)
	s, err := k.client.Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", warmpool.Errorf(warmpool.CodeValidation, "secret %s/%s: not found", ns, secret)
	case apierrors.IsForbidden(err):
		return "", warmpool.Errorf(warmpool.CodeValidation, "secret %s/%s: warmpool may not read it (its Role needs get on secrets in %s)", ns, secret, ns)
	case err != nil:
		return "", fmt.Errorf("read secret %s/%s: %w", ns, secret, err)
	}
	if v, ok := s.Data[key]; ok {
		return string(v), nil
	}
	if v, ok := s.StringData[key]; ok {
		return v, nil
	}
	return "", warmpool.Errorf(warmpool.CodeValidation, "secret %s/%s has no key %q", ns, secret, key)
}
