// Package manifests renders the kustomize directories under deploy/ for tests and
// decodes what they render into typed Kubernetes objects.
//
// It renders with `kubectl kustomize`, what operators run (kubectl apply -k), and
// without kubectl with the kustomize of the same line from the Go module proxy.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Kustomize is the module path and version of the kustomize that renders when
// kubectl is missing: the one kubectl 1.32 embeds.
const Kustomize = "sigs.k8s.io/kustomize/kustomize/v5@v5.5.0"

// Render returns the multi-document YAML that kustomize renders from dir.
func Render(ctx context.Context, dir string) ([]byte, error) {
	var cmd *exec.Cmd
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		cmd = exec.CommandContext(ctx, kubectl, "kustomize", dir)
	} else {
		cmd = exec.CommandContext(ctx, "go", "run", Kustomize, "build", dir)
	}
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

// Decode decodes each document of rendered YAML into the typed object of its kind
// (apps/v1 Deployment, v1 Service, …).
func Decode(rendered []byte) ([]runtime.Object, error) {
	docs, err := Documents(rendered)
	if err != nil {
		return nil, err
	}
	objs := make([]runtime.Object, 0, len(docs))
	for _, doc := range docs {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			line, _, _ := bytes.Cut(bytes.TrimSpace(doc), []byte("\n"))
			return nil, fmt.Errorf("decode %q: %w", line, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}
