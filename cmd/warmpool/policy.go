package main

import (
	"flag"
	"strings"

	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/podpolicy"
)

// policyOptions are the serve flags of the deploy policy (SPEC §11.1), which every
// config PUT is held to, whatever the driver.
type policyOptions struct {
	podSecurity, namespaces, imagePrefixes, maxCPU, maxMemory string
}

// policyFlags declares the policy's flags on fs.
func policyFlags(fs *flag.FlagSet) *policyOptions {
	p := &policyOptions{}
	fs.StringVar(&p.podSecurity, "pod-security", "restricted", "Pod Security Standards level every scope's pod is held to: restricted, baseline or privileged")
	fs.StringVar(&p.namespaces, "namespaces", "", "comma-separated namespaces a scope's deploy.namespace may name (default: the kubernetes driver's --namespace alone)")
	fs.StringVar(&p.imagePrefixes, "image-prefixes", "", "comma-separated prefixes every image of a scope's pod (containers, init containers, image volumes) must start with, e.g. registry.example/agents/ (default: any image)")
	fs.StringVar(&p.maxCPU, "max-pod-cpu", "", "most cpu one pod may request (and have as limits), counted as the scheduler does: containers and sidecars, init containers, pod-level resources and overhead, e.g. 4 (default: no cap)")
	fs.StringVar(&p.maxMemory, "max-pod-memory", "", "most memory one pod may request (and have as limits), counted as the scheduler does: containers and sidecars, init containers, pod-level resources and overhead, e.g. 8Gi (default: no cap)")
	return p
}

// build is the policy of the parsed flags for the driver picked, whose Factory names
// the namespace of the pods of a scope that names none (the kubernetes driver's
// --namespace); a driver without namespaces names none.
func (p *policyOptions) build(picked driver.Factory) (*podpolicy.Policy, error) {
	namespace := ""
	if picked.Namespace != nil {
		namespace = picked.Namespace()
	}
	return podpolicy.New(podpolicy.Config{PodSecurity: p.podSecurity, Namespace: namespace, Namespaces: commaList(p.namespaces),
		ImagePrefixes: commaList(p.imagePrefixes), MaxPodCPU: p.maxCPU, MaxPodMemory: p.maxMemory})
}

// commaList splits a comma-separated flag value, leaving out empty items.
func commaList(v string) []string {
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
