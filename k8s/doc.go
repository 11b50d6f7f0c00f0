// Package k8s is the Kubernetes pod driver (Kubernetes, built on client-go), the
// production implementation of warmpool.PodDriver. It imports the root package,
// client-go and podpolicy, whose AgentPod renders the pods it creates and dry-runs (the
// very pods the deploy policy checks). The drivers that need no cluster live in
// driver/ (driver/local runs pods as local processes, driver/fake keeps them in memory
// for tests), each in its own package so that nothing that uses them compiles
// client-go; driver/drivertest holds the contract suite all three pass.
package k8s
