package warmpool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// ScopeConfig is the configuration of one scope (SPEC §4).
type ScopeConfig struct {
	// Tenant is the tenant whose quotas the scope counts against (SPEC §12.1): an id
	// of the rules of a scope id. Blank until the config is stored under its scope,
	// when scopes.Service fills it with TenantOf; a class B field.
	Tenant string     `json:"tenant,omitempty"`
	Deploy DeploySpec `json:"deploy"`
	Pool   PoolConfig `json:"pool"`
	// Agent is how the scope's agents report (class B).
	Agent AgentConfig `json:"agent"`
}

// DeploySpec is the pod template of a scope. Any change to it is a class A change:
// a new deploy_ver.
type DeploySpec struct {
	Image         string            `json:"image"`
	Namespace     string            `json:"namespace"`
	ContainerName string            `json:"container_name"`
	Command       []string          `json:"command"`
	Args          []string          `json:"args"`
	Env           map[string]string `json:"env"`
	Resources     Resources         `json:"resources"`
	Port          int               `json:"port"`
	SSEPath       string            `json:"sse_path"`
	HealthPath    string            `json:"health_path"`
	ReadyTimeoutS int               `json:"ready_timeout_s"`
	// PodTemplate is a Kubernetes PodTemplateSpec (SPEC §11.1) as canonical JSON, or
	// nil; podtemplate.go reads what the root needs of it.
	PodTemplate json.RawMessage `json:"pod_template,omitempty"`
}

// Resources are the container's resource requests.
type Resources struct {
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
}

// PoolConfig holds the pool parameters of a scope. A change to it alone is class B:
// no pod is touched.
type PoolConfig struct {
	MaxConcurrency     int `json:"max_concurrency"`
	PodConcurrency     int `json:"pod_concurrency"`
	MinIdlePods        int `json:"min_idle_pods"`
	PodTTLS            int `json:"pod_ttl_s"`
	SessionTTLS        int `json:"session_ttl_s"`
	QueueSize          int `json:"queue_size"`
	WaitTimeoutS       int `json:"wait_timeout_s"`
	MaxParallelDeploys int `json:"max_parallel_deploys"`
	// HoldTTLS is how long a pod handed out by acquire stays held without a touch.
	HoldTTLS int `json:"hold_ttl_s"`
	// ProbePeriodS is how often each pod's health endpoint is probed, like a
	// Kubernetes readiness probe's period; each pod's probes keep their own offset
	// within the period, so the probes of many pods spread over it.
	ProbePeriodS int `json:"probe_period_s"`
	// Recycle is what becomes of a pod whose last session or hold ends: RecycleReuse
	// (it goes idle, warm for the next) or RecycleDelete (it is deleted, so every
	// user gets a fresh pod; the refill keeps the pool warm with new ones).
	Recycle string `json:"recycle"`
	// MaxSessionsPerPod is how many sessions and holds a pod serves over its life
	// (0: no limit): once it has served that many it takes no new one and is deleted
	// when its last one ends.
	MaxSessionsPerPod int `json:"max_sessions_per_pod"`
	// Rollout is how a class A change replaces the pods: RolloutDrain (new sessions go
	// to the new version's pods at once, the old ones drain) or RolloutPrewarm (new
	// sessions go on to the previous version's pods while max(1, min_idle_pods) pods of
	// the new one deploy, until they are Ready or ready_timeout_s has passed).
	Rollout string `json:"rollout"`
	// WarmPolicy is how many idle pods the pool keeps: WarmStatic (min_idle_pods) or
	// WarmDemand (as many as the routes of the next deploy time will take, estimated
	// from the scope's recent slot takes and frees, within min_idle_pods and
	// max_idle_pods; SPEC §11.3).
	WarmPolicy string `json:"warm_policy"`
	// MaxIdlePods bounds the idle pods the demand policy keeps: 0 (the default) for
	// max_pods, else between min_idle_pods and max_pods (MaxIdle).
	MaxIdlePods int `json:"max_idle_pods"`
}

// The values of PoolConfig.Recycle.
const (
	RecycleReuse  = "reuse"
	RecycleDelete = "delete"
)

// The values of PoolConfig.Rollout.
const (
	RolloutDrain   = "drain"
	RolloutPrewarm = "prewarm"
)

// The values of PoolConfig.WarmPolicy.
const (
	WarmStatic = "static"
	WarmDemand = "demand"
)

// The defaults of every scope field, defined here and nowhere else.
const (
	DefaultImage              = "warmpool/demo-agent:latest"
	DefaultContainerName      = "agent"
	DefaultCPU                = "500m"
	DefaultMemory             = "512Mi"
	DefaultPort               = 8080
	DefaultSSEPath            = "/sse"
	DefaultHealthPath         = "/health"
	DefaultReadyTimeoutS      = 300
	DefaultMaxConcurrency     = 8
	DefaultPodConcurrency     = 2
	DefaultMinIdlePods        = 0
	DefaultPodTTLS            = 300
	DefaultSessionTTLS        = 600
	DefaultQueueSize          = 4
	DefaultWaitTimeoutS       = 10
	DefaultMaxParallelDeploys = 0
	DefaultHoldTTLS           = 300
	DefaultProbePeriodS       = 10
	DefaultRecycle            = RecycleReuse
	DefaultMaxSessionsPerPod  = 0
	DefaultRollout            = RolloutDrain
	DefaultWarmPolicy         = WarmStatic
	DefaultMaxIdlePods        = 0
)

// Limits on scope fields.
const (
	MaxReadyTimeoutS  = 3600
	MaxConcurrencyCap = 100000
	MaxPodConcurrency = 10000
	MaxQueueSize      = 100000
	MaxWaitTimeoutS   = 600
	MaxTTLS           = 30 * 24 * 3600
	MaxProbePeriodS   = 3600
	MaxSessionsPerPod = 1000000000
	maxListLen        = 64
	maxStringLen      = 1024
)

// scopeDefaults is the table of scope defaults, built once from the constants above.
// DefaultScopeConfig hands out copies of it and Normalize fills from it; nothing else
// reads it.
var scopeDefaults = ScopeConfig{
	Deploy: DeploySpec{
		Image:         DefaultImage,
		ContainerName: DefaultContainerName,
		Resources:     Resources{CPU: DefaultCPU, Memory: DefaultMemory},
		Port:          DefaultPort,
		SSEPath:       DefaultSSEPath,
		HealthPath:    DefaultHealthPath,
		ReadyTimeoutS: DefaultReadyTimeoutS,
	},
	Pool: PoolConfig{
		MaxConcurrency:     DefaultMaxConcurrency,
		PodConcurrency:     DefaultPodConcurrency,
		MinIdlePods:        DefaultMinIdlePods,
		PodTTLS:            DefaultPodTTLS,
		SessionTTLS:        DefaultSessionTTLS,
		QueueSize:          DefaultQueueSize,
		WaitTimeoutS:       DefaultWaitTimeoutS,
		MaxParallelDeploys: DefaultMaxParallelDeploys,
		HoldTTLS:           DefaultHoldTTLS,
		ProbePeriodS:       DefaultProbePeriodS,
		Recycle:            DefaultRecycle,
		MaxSessionsPerPod:  DefaultMaxSessionsPerPod,
		Rollout:            DefaultRollout,
		WarmPolicy:         DefaultWarmPolicy,
		MaxIdlePods:        DefaultMaxIdlePods,
	},
	Agent: AgentConfig{ReportIntervalS: DefaultReportIntervalS},
}

// DefaultScopeConfig returns a normalized config with every field at its default.
func DefaultScopeConfig() ScopeConfig {
	c := scopeDefaults
	c.Deploy.fillCollections()
	return c
}

// DecodeBase is the config a document is decoded onto: the numbers at their defaults,
// so that a document that omits one gets its default, and the strings blank, so that
// Normalize fills them knowing what the document gave (the pod template's agent
// container may set the image or the resources instead of the shorthand).
func DecodeBase() ScopeConfig {
	c := DefaultScopeConfig()
	c.Deploy.Image, c.Deploy.ContainerName, c.Deploy.Resources = "", "", Resources{}
	c.Deploy.SSEPath, c.Deploy.HealthPath = "", ""
	return c
}

// fieldErrors are the faults found in a config, each "field: what is wrong", in a
// stable order.
type fieldErrors []string

func (f *fieldErrors) add(field, format string, args ...any) {
	*f = append(*f, field+": "+fmt.Sprintf(format, args...))
}

// err is the faults as one VALIDATION *Error, or nil when there are none.
func (f fieldErrors) err() error {
	if len(f) == 0 {
		return nil
	}
	return Errorf(CodeValidation, "%s", strings.Join(f, "; "))
}

// LoadScopeConfig reads a config document as a config store kept it and normalizes
// it. Unlike httpx.DecodeScopeConfig (a request body) it ignores fields it does not know (a row written by a
// newer version stays readable after a rollback), and a field added after the row was
// written takes its default instead of a silent zero.
func LoadScopeConfig(doc []byte) (ScopeConfig, error) {
	cfg := DecodeBase()
	if err := json.Unmarshal(doc, &cfg); err != nil {
		return ScopeConfig{}, JSONError(err)
	}
	if err := cfg.Normalize(); err != nil {
		return ScopeConfig{}, err
	}
	return cfg, nil
}

var (
	dnsLabelRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	envNameRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,254}$`)
	// A Kubernetes resource quantity: a decimal number with an optional suffix.
	quantityRe = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]+)?$`)
	imageRe    = regexp.MustCompile(`^[\x21-\x7e]+$`)
	httpPathRe = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:@/%-]{0,255}$`)
)

// Normalize fills every unset field with its one default and validates the result.
// Unset means a blank string or a nil list or map; numbers have no unset value (zero
// is a value, checked by Validate), so a document that omits one gets its default from
// DecodeScopeConfig. Normalize runs once, where a config enters the system
// (DecodeScopeConfig, LoadScopeConfig, scopes.Service.Put); every later step receives
// a normalized config and fills nothing. Normalize is idempotent.
func (c *ScopeConfig) Normalize() error {
	return c.NormalizeWith(nil)
}

// NormalizeWith is Normalize for a config that a decoder has already found faults in
// (each "field: what is wrong"): one VALIDATION error names those first, then every
// fault of the filled config, so a caller learns of them all at once.
func (c *ScopeConfig) NormalizeWith(found []string) error {
	c.fill()
	faults := fieldErrors(found)
	c.check(&faults)
	return faults.err()
}

// fill gives every unset field its default (see Normalize).
func (c *ScopeConfig) fill() {
	d, def := &c.Deploy, &scopeDefaults.Deploy
	if strings.TrimSpace(d.ContainerName) == "" {
		d.ContainerName = def.ContainerName
	}
	if t, err := canonicalTemplate(d.PodTemplate); err == nil {
		d.PodTemplate = t
	}
	// What the template's agent container sets takes no shorthand default.
	agent, _ := d.Agent()
	for _, f := range []struct {
		v   *string
		def string
		ok  bool
	}{
		{&d.Image, def.Image, !agent.Sets["image"]},
		{&d.Resources.CPU, def.Resources.CPU, !agent.Sets["resources"]},
		{&d.Resources.Memory, def.Resources.Memory, !agent.Sets["resources"]},
		{&d.SSEPath, def.SSEPath, true},
		{&d.HealthPath, def.HealthPath, true},
		{&c.Pool.Recycle, scopeDefaults.Pool.Recycle, true},
		{&c.Pool.Rollout, scopeDefaults.Pool.Rollout, true},
		{&c.Pool.WarmPolicy, scopeDefaults.Pool.WarmPolicy, true},
	} {
		if f.ok && strings.TrimSpace(*f.v) == "" {
			*f.v = f.def
		}
	}
	d.fillCollections()
}

// fillCollections makes nil lists and maps empty: stored as [] and {}, never null, so
// a spec has one canonical form and one deploy_ver.
func (d *DeploySpec) fillCollections() {
	if d.Command == nil {
		d.Command = []string{}
	}
	if d.Args == nil {
		d.Args = []string{}
	}
	if d.Env == nil {
		d.Env = map[string]string{}
	}
}

// Validate checks every field; the error names every bad one (one fault per field,
// in a stable order).
func (c ScopeConfig) Validate() error {
	var faults fieldErrors
	c.check(&faults)
	return faults.err()
}

// check adds a fault for every bad field of c.
func (c ScopeConfig) check(faults *fieldErrors) {
	d, p := c.Deploy, c.Pool
	bad := faults.add
	if c.Tenant != "" && !ValidScopeID(c.Tenant) {
		bad("tenant", "must be a tenant id matching ^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$ (a scope id's rules), got %q", c.Tenant)
	}
	// between adds a fault unless lo <= v <= hi.
	between := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(field, "must be between %d and %d, got %d", lo, hi, v)
		}
	}
	d.checkTemplate(faults)
	agent, _ := d.Agent()
	if (d.Image != "" || !agent.Sets["image"]) && (d.Image == "" || len(d.Image) > maxStringLen || !imageRe.MatchString(d.Image)) {
		bad("deploy.image", "must be an image reference without spaces or control characters, 1-%d chars", maxStringLen)
	}
	if d.Namespace != "" && !dnsLabelRe.MatchString(d.Namespace) {
		bad("deploy.namespace", "must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63 chars)")
	}
	if !dnsLabelRe.MatchString(d.ContainerName) {
		bad("deploy.container_name", "must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63 chars)")
	}
	between("deploy.port", d.Port, 1, 65535)
	if !httpPathRe.MatchString(d.SSEPath) {
		bad("deploy.sse_path", "must be an absolute URL path")
	}
	if !httpPathRe.MatchString(d.HealthPath) {
		bad("deploy.health_path", "must be an absolute URL path")
	}
	between("deploy.ready_timeout_s", d.ReadyTimeoutS, 1, MaxReadyTimeoutS)
	inTemplate := agent.Sets["resources"] && d.Resources == (Resources{})
	if !inTemplate && !quantityRe.MatchString(d.Resources.CPU) {
		bad("deploy.resources.cpu", "must be a quantity such as 500m or 2, got %q", d.Resources.CPU)
	}
	if !inTemplate && !quantityRe.MatchString(d.Resources.Memory) {
		bad("deploy.resources.memory", "must be a quantity such as 512Mi, got %q", d.Resources.Memory)
	}
	for _, l := range []struct {
		name string
		list []string
	}{{"deploy.command", d.Command}, {"deploy.args", d.Args}} {
		if len(l.list) > maxListLen {
			bad(l.name, "at most %d items", maxListLen)
			continue
		}
		for _, s := range l.list {
			if len(s) > maxStringLen {
				bad(l.name, "items must be at most %d chars", maxStringLen)
				break
			}
		}
	}
	if len(d.Env) > maxListLen {
		bad("deploy.env", "at most %d variables", maxListLen)
	} else {
		for _, k := range slices.Sorted(maps.Keys(d.Env)) {
			if !envNameRe.MatchString(k) {
				bad("deploy.env", "invalid variable name %q", k)
				break
			}
		}
		for _, k := range slices.Sorted(maps.Keys(d.Env)) {
			if len(d.Env[k]) > maxStringLen {
				bad("deploy.env."+k, "value must be at most %d chars", maxStringLen)
			}
		}
	}
	podConcOK := p.PodConcurrency >= 1 && p.PodConcurrency <= MaxPodConcurrency
	if !podConcOK {
		bad("pool.pod_concurrency", "must be between 1 and %d, got %d", MaxPodConcurrency, p.PodConcurrency)
	}
	maxConcOK := p.MaxConcurrency >= max(p.PodConcurrency, 1) && p.MaxConcurrency <= MaxConcurrencyCap
	if !maxConcOK {
		bad("pool.max_concurrency", "must be between pod_concurrency (%d) and %d, got %d", p.PodConcurrency, MaxConcurrencyCap, p.MaxConcurrency)
	}
	// The bounds below derive from max_pods, which means nothing while its inputs are bad.
	if podConcOK && maxConcOK {
		if p.MinIdlePods < 0 || p.MinIdlePods > p.MaxPods() {
			bad("pool.min_idle_pods", "must be between 0 and max_pods (%d), got %d", p.MaxPods(), p.MinIdlePods)
		}
		if p.MaxIdlePods != 0 && (p.MaxIdlePods < p.MinIdlePods || p.MaxIdlePods > p.MaxPods()) {
			bad("pool.max_idle_pods", "must be 0 (max_pods) or between min_idle_pods (%d) and max_pods (%d), got %d", p.MinIdlePods, p.MaxPods(), p.MaxIdlePods)
		}
		if p.MaxParallelDeploys < 0 || p.MaxParallelDeploys > p.MaxPods() {
			bad("pool.max_parallel_deploys", "must be between 0 (no limit below max_pods) and max_pods (%d), got %d", p.MaxPods(), p.MaxParallelDeploys)
		}
	}
	between("pool.pod_ttl_s", p.PodTTLS, 1, MaxTTLS)
	between("pool.session_ttl_s", p.SessionTTLS, 1, MaxTTLS)
	between("pool.queue_size", p.QueueSize, 0, MaxQueueSize)
	between("pool.wait_timeout_s", p.WaitTimeoutS, 0, MaxWaitTimeoutS)
	between("pool.hold_ttl_s", p.HoldTTLS, 1, MaxTTLS)
	between("pool.probe_period_s", p.ProbePeriodS, 1, MaxProbePeriodS)
	c.Agent.check(faults)
	if p.Recycle != RecycleReuse && p.Recycle != RecycleDelete {
		bad("pool.recycle", "must be %q or %q, got %q", RecycleReuse, RecycleDelete, p.Recycle)
	}
	between("pool.max_sessions_per_pod", p.MaxSessionsPerPod, 0, MaxSessionsPerPod)
	if p.Rollout != RolloutDrain && p.Rollout != RolloutPrewarm {
		bad("pool.rollout", "must be %q or %q, got %q", RolloutDrain, RolloutPrewarm, p.Rollout)
	}
	if p.WarmPolicy != WarmStatic && p.WarmPolicy != WarmDemand {
		bad("pool.warm_policy", "must be %q or %q, got %q", WarmStatic, WarmDemand, p.WarmPolicy)
	}
}

// MaxPods is ceil(max_concurrency / pod_concurrency): the most pods (plus deploys in
// flight) a scope may have.
func (p PoolConfig) MaxPods() int {
	if p.PodConcurrency < 1 {
		return 0
	}
	return (p.MaxConcurrency + p.PodConcurrency - 1) / p.PodConcurrency
}

// MaxIdle is the most idle pods the demand policy keeps: max_idle_pods, or max_pods
// when it is 0.
func (p PoolConfig) MaxIdle() int {
	if p.MaxIdlePods == 0 {
		return p.MaxPods()
	}
	return p.MaxIdlePods
}

// ParallelDeploys is the most deploys of the scope that may run at once.
func (p PoolConfig) ParallelDeploys() int {
	if p.MaxParallelDeploys == 0 {
		return p.MaxPods()
	}
	return p.MaxParallelDeploys
}

// DeployVer fingerprints the deploy fields: the first 16 hex digits of the sha256 of
// their canonical JSON (struct field order, sorted map keys). d must be normalized
// (ScopeConfig.Normalize): DeployVer fills nothing, so a nil list would hash apart
// from the empty list a normalized spec holds.
func (d DeploySpec) DeployVer() string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		panic(err) // a struct of strings, ints, slices and a string map always encodes
	}
	sum := sha256.Sum256(bytes.TrimSpace(buf.Bytes()))
	return hex.EncodeToString(sum[:])[:16]
}

// JSONError turns an encoding/json error into a VALIDATION *Error that names the field.
func JSONError(err error) *Error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return Errorf(CodeValidation, "%s: expected %s, got JSON %s", field, typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return Errorf(CodeValidation, "body: malformed JSON at offset %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.EOF):
		return Errorf(CodeValidation, "body: empty, expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(CodeValidation, "body: truncated JSON")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		if f = strings.Trim(f, `"`); f == "" {
			f = `""`
		}
		return Errorf(CodeValidation, "%s: unknown field", f)
	}
	return Errorf(CodeValidation, "body: %s", strings.TrimPrefix(msg, "json: "))
}
