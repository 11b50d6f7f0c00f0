package k8s

import (
	"errors"
	"fmt"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultBurst is the client's burst when a QPS is set and no burst. With no QPS (the
// default) the client sets no rate of its own: the API server's priority and fairness
// limits it, and its 429s are retried after the Retry-After the server names (client-go
// does so for every verb, up to 10 times; Kubernetes.call after that). A client-side
// 50 QPS capped a cold burst of 500 deploys at 62 routes/s on the kwok rig (issue 22),
// where the API server took over 195 creates/s.
const DefaultBurst = 100

// inClusterNamespaceFile is where a pod finds its own namespace.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ClientOptions says how to reach the API server (--kubeconfig and the QPS/burst flags).
type ClientOptions struct {
	// Kubeconfig is the path of a kubeconfig file; empty means in-cluster config.
	Kubeconfig string
	// QPS, when positive, limits the client's request rate (burst Burst, zero:
	// DefaultBurst); zero or less sets no client-side limit.
	QPS   float32
	Burst int
	// UserAgent names the caller in the API server's logs; empty means "warmpool".
	UserAgent string
}

// NewClient builds a client of the core/v1 API group (pods and nodes are all the driver
// uses) from opts. It also returns the namespace the config implies — the kubeconfig
// context's namespace ("default" if it names none), or in-cluster the pod's own — or ""
// when there is none, as the fallback for --namespace.
func NewClient(opts ClientOptions) (corev1client.CoreV1Interface, string, error) {
	cfg, ns, err := RESTConfig(opts)
	if err != nil {
		return nil, "", err
	}
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, ns, nil
}

// RESTConfig is the rest.Config NewClient uses, and the namespace it implies.
func RESTConfig(opts ClientOptions) (*rest.Config, string, error) {
	var (
		cfg *rest.Config
		ns  string
		err error
	)
	if opts.Kubeconfig != "" {
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: opts.Kubeconfig}, &clientcmd.ConfigOverrides{})
		if cfg, err = loader.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("kubeconfig %s: %w", opts.Kubeconfig, err)
		}
		if n, _, nerr := loader.Namespace(); nerr == nil {
			ns = n
		}
	} else {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, "", fmt.Errorf("in-cluster kubernetes config (set --kubeconfig outside a cluster): %w", err)
		}
		if b, rerr := os.ReadFile(inClusterNamespaceFile); rerr == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	if cfg.QPS <= 0 {
		cfg.QPS = -1 // client-go sets no rate limiter for a negative QPS (0 would be its 5)
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	// No gzip: the API server would compress every watch event and list for the
	// driver, and the driver decompress it, CPU on both sides for bandwidth a cluster's
	// own network does not lack (a tenth of the driver's watch CPU on the kwok rig).
	cfg.DisableCompression = true
	cfg.UserAgent = opts.UserAgent
	if cfg.UserAgent == "" {
		cfg.UserAgent = "warmpool"
	}
	return cfg, ns, nil
}

// apiMessage is an API server error as a gateway may read it: the server's own
// message, or for an error of the transport only its last cause ("connection
// refused"): never the URL or the address of the cluster's API server.
func apiMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		if m := s.Status().Message; m != "" {
			return m
		}
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return "the API server did not answer: " + msg
}
