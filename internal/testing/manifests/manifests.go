// Package manifests renders the kustomize directories and the Helm chart under deploy/
// for tests and decodes what they render into typed Kubernetes objects.
//
// It renders kustomize with `kubectl kustomize`, what operators run (kubectl apply
// -k), and without kubectl with the kustomize of the same line from the Go module
// proxy; the chart with the helm that `make lint` runs (Helm), from the module proxy
// too.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Kustomize is the module path and version of the kustomize that renders when
// kubectl is missing: the one kubectl 1.32 embeds.
const Kustomize = "sigs.k8s.io/kustomize/kustomize/v5@v5.5.0"

// Helm is the module path and version of the helm that renders the chart: the one the
// Makefile's HELM names (a test in deploy/ checks they agree). The Go build cache
// keeps its binary after the first run.
const Helm = "helm.sh/helm/v4/cmd/helm@v4.3.2"

// Render returns the multi-document YAML that kustomize renders from dir.
func Render(ctx context.Context, dir string) ([]byte, error) {
	var cmd *exec.Cmd
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		cmd = exec.CommandContext(ctx, kubectl, "kustomize", dir)
	} else {
		cmd = exec.CommandContext(ctx, "go", "run", Kustomize, "build", dir)
	}
	return output(cmd)
}

// RenderChart returns what `helm template RELEASE CHART --namespace NAMESPACE` renders
// from the chart in dir, with values (YAML; none when empty) over the chart's own.
func RenderChart(ctx context.Context, dir, release, namespace string, values []byte) ([]byte, error) {
	args := []string{"run", Helm, "template", release, dir, "--namespace", namespace}
	cmd := exec.CommandContext(ctx, "go", args...)
	if len(values) > 0 {
		cmd.Args = append(cmd.Args, "--values", "-")
		cmd.Stdin = bytes.NewReader(values)
	}
	return output(cmd)
}

// output runs cmd and returns its stdout, or an error with its stderr.
func output(cmd *exec.Cmd) ([]byte, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", cmd, err, stderr.Bytes())
	}
	return out, nil
}

// Documents splits rendered YAML into its non-empty documents.
func Documents(rendered []byte) ([][]byte, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	var docs [][]byte
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// decoder knows the API groups deploy/ renders: core/v1 (Namespace, ServiceAccount,
// ConfigMap, Service), apps/v1 (Deployment), rbac/v1 (Role, RoleBinding), policy/v1
// (PodDisruptionBudget) and networking/v1 (NetworkPolicy). Registering only these keeps the other groups' types out of
// every build that decodes manifests.
var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}()

// Decode decodes each document of rendered YAML into the typed object of its kind
// (apps/v1 Deployment, v1 Service, …). A kind outside the groups deploy/ uses (core,
// apps, rbac, policy, networking) is an error naming the document.
func Decode(rendered []byte) ([]runtime.Object, error) {
	docs, err := Documents(rendered)
	if err != nil {
		return nil, err
	}
	objs := make([]runtime.Object, 0, len(docs))
	for _, doc := range docs {
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			line, _, _ := bytes.Cut(bytes.TrimSpace(doc), []byte("\n"))
			return nil, fmt.Errorf("decode %q: %w", line, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}
