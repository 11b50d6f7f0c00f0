package warmpool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
)

// A scope's pod template (SPEC §11.1) is a Kubernetes PodTemplateSpec kept as its
// canonical JSON. The root reads only what it needs to fill defaults and to refuse what
// warmpool owns: the agent container (by deploy.container_name), which of the shorthand
// fields that container sets, and the owned fields. Everything else — unknown fields,
// types, quantities, the Pod Security level — is checked by a DeployPolicy built on
// Kubernetes' own types (package podpolicy), which the binary installs.

// templateView is the part of a pod template the root reads.
type templateView struct {
	Metadata struct {
		Name            string          `json:"name"`
		GenerateName    string          `json:"generateName"`
		Namespace       string          `json:"namespace"`
		OwnerReferences json.RawMessage `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeName      string                       `json:"nodeName"`
		RestartPolicy string                       `json:"restartPolicy"`
		Containers    []map[string]json.RawMessage `json:"containers"`
	} `json:"spec"`
}

// shorthandFields are the deploy fields that may be given in the shorthand or in the
// agent container, not both, by their name in the container.
var shorthandFields = []struct{ shorthand, container string }{
	{"deploy.image", "image"},
	{"deploy.command", "command"},
	{"deploy.args", "args"},
	{"deploy.env", "env"},
	{"deploy.resources", "resources"},
}

// AgentTemplate is what a pod template says of the agent container.
type AgentTemplate struct {
	// Index is the agent container's index in spec.containers (-1: none).
	Index int
	// Sets names the shorthand fields the container sets ("image", "env", …).
	Sets map[string]bool
	// Env holds the container's plain env values (name → value; those with valueFrom
	// are left out): what the local and fake drivers use of a template.
	Env map[string]string
	// Requests are the container's cpu and memory requests ("" where it sets none).
	Requests Resources
}

// Agent reads the agent container of the spec's pod template; a spec without a
// template has none (Index -1).
func (d DeploySpec) Agent() (AgentTemplate, error) {
	a := AgentTemplate{Index: -1, Sets: map[string]bool{}, Env: map[string]string{}}
	if len(d.PodTemplate) == 0 {
		return a, nil
	}
	var v templateView
	if err := json.Unmarshal(d.PodTemplate, &v); err != nil {
		return a, fmt.Errorf("%s", typeMessage(err))
	}
	for i, c := range v.Spec.Containers {
		var name string
		if json.Unmarshal(c["name"], &name) != nil || name != d.ContainerName {
			continue
		}
		a.Index = i
		for _, f := range shorthandFields {
			if raw, ok := c[f.container]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
				a.Sets[f.container] = true
			}
		}
		var env []struct {
			Name      string          `json:"name"`
			Value     string          `json:"value"`
			ValueFrom json.RawMessage `json:"valueFrom"`
		}
		if raw, ok := c["env"]; ok {
			if err := json.Unmarshal(raw, &env); err != nil {
				return a, fmt.Errorf("spec.containers[%d].env: %s", i, typeMessage(err))
			}
		}
		for _, e := range env {
			if len(e.ValueFrom) == 0 {
				a.Env[e.Name] = e.Value
			}
		}
		var res struct {
			Requests Resources `json:"requests"`
		}
		if raw, ok := c["resources"]; ok && a.Sets["resources"] {
			if err := json.Unmarshal(raw, &res); err != nil {
				return a, fmt.Errorf("spec.containers[%d].resources: %s", i, typeMessage(err))
			}
		}
		a.Requests = res.Requests
		break
	}
	return a, nil
}

// typeMessage is an encoding/json error without its "json: " prefix.
func typeMessage(err error) string { return strings.TrimPrefix(err.Error(), "json: ") }

// canonicalTemplate is the template as canonical JSON (sorted keys, no space), so that
// one template has one deploy_ver however its document was written; numbers are kept
// as written.
func canonicalTemplate(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(buf.Bytes()), nil
}

// checkTemplate adds a fault for each thing of the template the root refuses: not an
// object, no agent container, a field warmpool owns, a shorthand field given in both
// places.
func (d DeploySpec) checkTemplate(faults *fieldErrors) {
	const path = "deploy.pod_template"
	if len(d.PodTemplate) == 0 {
		return
	}
	if t := bytes.TrimSpace(d.PodTemplate); len(t) == 0 || t[0] != '{' {
		faults.add(path, "must be an object (a Kubernetes PodTemplateSpec)")
		return
	}
	var v templateView
	if err := json.Unmarshal(d.PodTemplate, &v); err != nil {
		faults.add(path, "%s", typeMessage(err))
		return
	}
	owned := []struct {
		field string
		set   bool
		use   string
	}{
		{"metadata.name", v.Metadata.Name != "", "warmpool names its pods"},
		{"metadata.generateName", v.Metadata.GenerateName != "", "warmpool names its pods"},
		{"metadata.namespace", v.Metadata.Namespace != "", "use deploy.namespace"},
		{"metadata.ownerReferences", len(v.Metadata.OwnerReferences) > 0 && string(v.Metadata.OwnerReferences) != "null", "warmpool owns its pods"},
		{"spec.nodeName", v.Spec.NodeName != "", "the scheduler places pods (use nodeSelector or affinity)"},
		{"spec.restartPolicy", v.Spec.RestartPolicy != "" && v.Spec.RestartPolicy != "Never", "an agent pod never restarts in place: leave it unset or Never"},
	}
	for _, o := range owned {
		if o.set {
			faults.add(path+"."+o.field, "owned by warmpool: %s", o.use)
		}
	}
	a, err := d.Agent()
	if err != nil {
		faults.add(path, "%v", err)
		return
	}
	if a.Index < 0 {
		faults.add(path+".spec.containers", "no container named %q (deploy.container_name): the agent container must be in the template", d.ContainerName)
		return
	}
	given := map[string]bool{
		"image": d.Image != "", "command": len(d.Command) > 0, "args": len(d.Args) > 0,
		"env": len(d.Env) > 0, "resources": d.Resources != (Resources{}),
	}
	for _, f := range shorthandFields {
		if a.Sets[f.container] && given[f.container] {
			faults.add(f.shorthand, "given twice: here and in %s.spec.containers[%d].%s; give it in one place", path, a.Index, f.container)
		}
	}
}

// PlainEnv is the agent's env as a driver without Kubernetes can give it: deploy.env
// and the plain values of the template's agent container (those from valueFrom need a
// cluster and are left out).
func (d DeploySpec) PlainEnv() map[string]string {
	env := maps.Clone(d.Env)
	if env == nil {
		env = map[string]string{}
	}
	if a, err := d.Agent(); err == nil {
		maps.Copy(env, a.Env)
	}
	return env
}
