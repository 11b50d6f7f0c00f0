// Package podpolicy is a scope's pod as Kubernetes runs it, and the operator's rules
// for it (SPEC §11.1). AgentPod renders the pod of a deploy request from its spec (the
// shorthand fields, the pod template decoded strictly with Kubernetes' own types,
// warmpool's labels, annotations and hardened defaults): the kubernetes driver (k8s/)
// creates and dry-runs what it renders, and Policy (warmpool.DeployPolicy) checks the
// same pod before a config is stored: the Pod Security Standards level, the namespaces
// and image prefixes allowed, the resource caps and the caps on its lists.
//
// It links Kubernetes' API types (k8s.io/api, apimachinery) and Pod Security
// admission, never client-go (`make lint` checks), so a binary without the kubernetes
// driver holds every config to the policy without linking a Kubernetes client.
package podpolicy
