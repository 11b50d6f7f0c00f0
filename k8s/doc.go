// Package k8s holds the pod drivers, the implementations of warmpool.PodDriver:
// Local runs each pod as a local demo-agent process, and Fake keeps pods in memory with
// knobs for delays and failures, for tests of the packages above. The package imports
// only the root package (and, for the kubernetes driver, client-go).
package k8s
