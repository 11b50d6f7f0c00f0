// Package k8s is the Kubernetes pod driver (Kubernetes, built on client-go), the
// production implementation of warmpool.PodDriver. It imports only the root package and
// client-go. The other drivers live beside it, each in its own package so that nothing
// that uses them compiles client-go: localpod runs pods as local processes and fakepod
// keeps them in memory for tests. drivertest holds the contract suite all three pass.
package k8s
