package k8s

import (
	"flag"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

// Name is the driver's name: `serve --driver kubernetes`.
const Name = "kubernetes"

// The driver registers itself, so only a program that imports this package (and so
// links client-go) can name it: cmd/warmpool does, the server's tests do not.
func init() { driver.Register(Name, flags) }

// options are the driver's serve flags.
type options struct {
	kubeconfig string
	namespace  string
	qps        float64
	burst      int
}

func flags(fs *flag.FlagSet, getenv func(string) string) driver.Factory {
	o := &options{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig path (default $KUBECONFIG); empty = in-cluster config")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of pods whose scope names none")
	fs.Float64Var(&o.qps, "kube-qps", 0, "Kubernetes client requests per second; 0: no client-side limit (the API server's priority and fairness limits, its 429s are retried after their Retry-After)")
	fs.IntVar(&o.burst, "kube-burst", DefaultBurst, "Kubernetes client burst, with --kube-qps")
	return driver.Factory{New: o.new, Namespace: func() string { return o.namespace }}
}

// new builds the driver: the client from the kubeconfig (or the in-cluster config),
// and the namespace of --namespace, else the one the config implies.
func (o *options) new(env driver.Env) (warmpool.PodDriver, error) {
	client, ns, err := NewClient(ClientOptions{Kubeconfig: o.kubeconfig, QPS: float32(o.qps), Burst: o.burst})
	if err != nil {
		return nil, err
	}
	if o.namespace != "" {
		ns = o.namespace
	}
	return NewKubernetes(client, Config{Namespace: ns, Logger: env.Logger, Clock: env.Clock}), nil
}
