// Package fake is a pod driver without pods for the tests of the packages above the
// drivers (rm, sm, sweeper, server) and for load tests: pods are records, kept in memory
// or in a directory that server processes on one machine share, and knobs shape deploy
// timing and failures without sleeps. It imports only the root package.
package fake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

// Driver is a warmpool.PodDriver whose pods are records: in its own memory (New, the
// zero value), or one file per pod in a directory (NewShared), so that replicas sharing
// it see and keep one another's pods. Deploy receives a normalized spec
// (warmpool.ScopeConfig.Normalize) and fills no defaults. It behaves like the kubernetes
// driver in the ways callers can observe: the pod exists (not Ready) from the start of
// the deploy, a second create of the same (scope, fence) fails with "already exists",
// and a failed or cancelled deploy removes its pod. Knobs shape timing and failures
// without sleeps. The zero value is ready to use; all methods are safe for concurrent
// use.
type Driver struct {
	// DeployDelay is how long each Deploy takes (after any Hold is released); ctx
	// cancellation cuts it short, and a delay past the ready timeout fails the deploy.
	// Set it before the first Deploy; SetDeployDelay changes it while deploys may run.
	DeployDelay time.Duration

	mu      sync.Mutex
	reg     registry
	probes  map[string]error
	records []*DeployRecord
	deleted []string
	failN   int
	failMsg string
	holds   int
	holdCh  chan struct{} // non-nil while held; closed on the last release
	changed chan struct{} // closed and replaced on every change, for waiters
	done    chan struct{} // closed by Close
	closed  bool
	events  []func(warmpool.PodEvent)
	// watched is what the watch of a shared directory saw at its last look (nil until
	// it starts, with the first OnPodEvent).
	watched map[string]watchedFile

	// started counts the Deploy calls; noRecords (a serving replica's driver) keeps
	// their records out of records, which would grow with every deploy for the life of
	// the process.
	started   int
	noRecords bool
	// secrets are what ReadSecret reads (SetSecret, --fake-secrets-file).
	secrets driver.Secrets
}

var (
	_ warmpool.PodDriver   = (*Driver)(nil)
	_ warmpool.PodNotifier = (*Driver)(nil)
)

// New returns an empty Driver whose pods exist only inside it: a second server
// process with its own fake driver sees none of them (and its sweeper takes them for
// pods that are gone).
func New() *Driver {
	f := &Driver{}
	f.lock()()
	return f
}

// NewShared returns a Driver that keeps its pods in dir, one file per pod, created if
// missing: the fake drivers of server processes on one machine that share dir see one
// another's pods, as replicas sharing one cluster do. The knobs (Hold, FailNext,
// SetProbe, the deploy records) stay each Driver's own. Kill and AddExternal write the
// pod's file and panic when they cannot: they are test knobs.
func NewShared(dir string) (*Driver, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fake driver: state dir: %w", err)
	}
	f := &Driver{reg: dirRegistry(dir)}
	f.lock()()
	return f, nil
}

// lock takes f.mu, with the zero value made usable, and returns its unlock:
// defer f.lock()().
func (f *Driver) lock() (unlock func()) {
	f.mu.Lock()
	f.initLocked()
	return f.mu.Unlock
}

// initLocked makes the zero value usable; f.mu is held.
func (f *Driver) initLocked() {
	if f.reg == nil {
		f.reg = memRegistry{}
	}
	if f.probes == nil {
		f.probes = map[string]error{}
		f.changed = make(chan struct{})
		f.done = make(chan struct{})
	}
}

// notifyLocked wakes everyone waiting on Changed; f.mu is held.
func (f *Driver) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// OnPodEvent makes the Driver report to fn, at once, every pod it has (as a watch's
// initial list does), then each change it makes: a deploy's pod as it is created, as
// it becomes ready and when a failed deploy removes it; Kill, AddExternal and Delete.
// A shared Driver also watches its directory (every WatchPeriod, until Close), so the
// pods that other processes create, change and delete are reported too, as an
// informer's list and watch report them.
func (f *Driver) OnPodEvent(fn func(warmpool.PodEvent)) {
	defer f.lock()()
	f.events = append(f.events, fn)
	if _, shared := f.reg.(dirRegistry); shared {
		if f.watched == nil {
			f.watched = map[string]watchedFile{}
			f.watchLocked(f.events) // the initial list: every pod there is to every function
			go f.watchDir(f.done)
		} else {
			f.replayLocked(fn)
		}
		return
	}
	f.replayLocked(fn)
}

// replayLocked reports every pod there is to fn; f.mu is held.
func (f *Driver) replayLocked(fn func(warmpool.PodEvent)) {
	all, err := f.reg.all()
	if err != nil {
		return // a shared directory that cannot be read: its watch reports what it reads later
	}
	for _, e := range all {
		fn(warmpool.PodEvent{Pod: e.pod()})
	}
}

// reportLocked hands an event of p to every OnPodEvent function; f.mu is held.
func (f *Driver) reportLocked(p warmpool.Pod, gone bool) {
	if gone {
		p.Ready = false
		if p.Dead == "" {
			p.Dead = "deleted"
		}
	}
	for _, fn := range f.events {
		fn(warmpool.PodEvent{Pod: p, Gone: gone})
	}
}

// WatchPeriod is how often a shared Driver with OnPodEvent functions looks at its
// directory for the changes other processes made.
const WatchPeriod = 250 * time.Millisecond

// watchedFile is a pod file as the directory's watch last saw it.
type watchedFile struct {
	mod  time.Time
	size int64
	pod  warmpool.Pod
}

// watchDir looks at the shared directory every WatchPeriod until done is closed.
func (f *Driver) watchDir(done <-chan struct{}) {
	t := time.NewTicker(WatchPeriod)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		f.mu.Lock()
		f.watchLocked(f.events)
		f.mu.Unlock()
	}
}

// watchLocked reads the shared directory and reports to fns each pod that appeared,
// changed (ready, dead) or is gone since the last look; a file whose time and size
// are as they were is not read again. f.mu is held.
func (f *Driver) watchLocked(fns []func(warmpool.PodEvent)) {
	d := f.reg.(dirRegistry)
	files, err := os.ReadDir(string(d))
	if err != nil {
		return // the next look tries again
	}
	report := func(p warmpool.Pod, gone bool) {
		for _, fn := range fns {
			fn(warmpool.PodEvent{Pod: p, Gone: gone})
		}
	}
	seen := make(map[string]bool, len(files))
	for _, file := range files {
		id, ok := strings.CutSuffix(file.Name(), entryExt)
		if !ok || file.IsDir() || strings.HasPrefix(file.Name(), ".") {
			continue
		}
		info, err := file.Info()
		if err != nil {
			continue // removed meanwhile: gone below, or at the next look
		}
		seen[id] = true
		was, known := f.watched[id]
		if known && was.mod.Equal(info.ModTime()) && was.size == info.Size() {
			continue
		}
		e, found, err := d.get(id)
		if err != nil || !found {
			delete(seen, id)
			continue
		}
		p := e.pod()
		f.watched[id] = watchedFile{mod: info.ModTime(), size: info.Size(), pod: p}
		if !known || was.pod.Ready != p.Ready || was.pod.Dead != p.Dead {
			report(p, false)
		}
	}
	for id, was := range f.watched {
		if !seen[id] {
			delete(f.watched, id)
			p := was.pod
			p.Ready, p.Dead = false, "deleted"
			report(p, true)
		}
	}
}

// pods returns every pod, oldest first, with Ready and Dead filled.
func (f *Driver) pods() ([]warmpool.Pod, error) {
	defer f.lock()()
	all, err := f.reg.all()
	if err != nil {
		return nil, fmt.Errorf("fake driver: list: %w", err)
	}
	out := make([]warmpool.Pod, 0, len(all))
	for _, e := range all {
		out = append(out, e.pod())
	}
	warmpool.SortPods(out)
	return out, nil
}

// Close makes in-flight and later deploys fail with DEPLOY_FAILED; the pods stay.
func (f *Driver) Close() error {
	defer f.lock()()
	if !f.closed {
		f.closed = true
		close(f.done)
		f.notifyLocked()
	}
	return nil
}

// Deploy creates the pod named warmpool.PodName(scope, fence), waits for any Hold and
// then DeployDelay, at most Spec.ReadyTimeoutS, and returns it Ready. Errors: VALIDATION
// for a ready timeout under a second (a spec that was not normalized); DEPLOY_FAILED
// when the name exists, when FailNext says so, when the pod was deleted or killed while
// starting, when it is not ready in time or when the driver is closed; ctx.Err() when
// ctx ends first. A failed deploy removes its pod.
func (f *Driver) Deploy(ctx context.Context, req warmpool.DeployRequest) (warmpool.Pod, error) {
	if err := ctx.Err(); err != nil {
		return warmpool.Pod{}, err
	}
	if req.Spec.ReadyTimeoutS < 1 {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeValidation, "deploy.ready_timeout_s: must be positive, got %d", req.Spec.ReadyTimeoutS)
	}
	name := warmpool.PodName(req.ScopeID, req.Fence)

	f.mu.Lock()
	f.initLocked()
	rec := &DeployRecord{Req: req, Start: time.Now()}
	f.started++
	if !f.noRecords {
		rec.Env = req.WithAgentEnv(req.Spec.PlainEnv(), name)
		f.records = append(f.records, rec)
	}
	f.notifyLocked()
	pod := warmpool.Pod{
		ID:        name,
		ScopeID:   req.ScopeID,
		DeployVer: req.DeployVer,
		Fence:     req.Fence,
		Namespace: req.Spec.Namespace,
		SSEURL:    fakeURL(name, req.Spec.SSEPath),
		HealthURL: fakeURL(name, req.Spec.HealthPath),
		CreatedAt: warmpool.UnixMs(rec.Start),
	}
	token := warmpool.NewID()
	var early error
	faults, ferr := f.reg.faults()
	if f.closed {
		early = errClosed
	} else if ferr != nil {
		early = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: read injected faults: %v", name, ferr)
	} else if faults.CreateError != "" {
		early = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: create: %s", name, faults.CreateError)
	} else if faults.CreateHang {
		f.mu.Unlock()
		return warmpool.Pod{}, f.hang(ctx, rec, name, req.Spec.ReadyTimeoutS)
	} else if err := f.reg.create(entry{Pod: pod, Token: token}); errors.Is(err, errExists) {
		early = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s already exists", name)
	} else if err != nil {
		early = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: register: %v", name, err)
	}
	if early != nil {
		rec.End, rec.Err = time.Now(), early
		f.mu.Unlock()
		return warmpool.Pod{}, early
	}
	f.reportLocked(pod, false)
	fail, failMsg := f.failN > 0, f.failMsg
	if fail {
		f.failN--
	}
	delay, done := f.DeployDelay, f.done
	f.mu.Unlock()
	req.Phase(warmpool.PhaseCreate)

	timeout := time.Duration(req.Spec.ReadyTimeoutS) * time.Second
	err := f.waitReady(ctx, delay, timeout, done, faults.NeverReady)
	if errors.Is(err, errNotReady) {
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s not ready within %s", name, timeout)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	cur, found, gerr := f.reg.get(name)
	mine := found && cur.Token == token
	switch {
	case err != nil:
	case fail:
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: %s", name, cmp.Or(failMsg, "injected failure"))
	case gerr != nil:
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: %v", name, gerr)
	case !mine:
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s was deleted before it became ready", name)
	case cur.Dead != "":
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s died before it became ready: %s", name, cur.Dead)
	}
	if err == nil {
		cur.Ready = true
		if perr := f.reg.put(cur); perr != nil {
			err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: mark ready: %v", name, perr)
		}
	}
	rec.End = time.Now()
	f.notifyLocked()
	if err != nil {
		if mine && f.reg.remove(name) == nil { // best effort: a leftover is an orphan the sweeper removes
			f.reportLocked(cur.pod(), true)
		}
		rec.Err = err
		return warmpool.Pod{}, err
	}
	rec.Pod = cur.pod()
	f.reportLocked(rec.Pod, false)
	req.Phase(warmpool.PhaseReady)
	return rec.Pod, nil
}

var (
	errClosed   = warmpool.Errorf(warmpool.CodeDeployFailed, "fake driver closed")
	errNotReady = errors.New("not ready in time")
)

// hang is a create call that never returns (Faults.CreateHang): it ends with the
// ready timeout, ctx or the driver's Close, having made no pod.
func (f *Driver) hang(ctx context.Context, rec *DeployRecord, name string, readyTimeoutS int) error {
	timeout := time.Duration(readyTimeoutS) * time.Second
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	err := f.waitReady(ctx, 0, timeout, done, true)
	if errors.Is(err, errNotReady) {
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: create did not return within %s", name, timeout)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rec.End, rec.Err = time.Now(), err
	f.notifyLocked()
	return err
}

// waitReady waits out any Hold, then delay, and answers errNotReady once timeout has
// passed; with never set the pod never gets ready, so it waits for that answer. A hold
// taken again before a blocked deploy wakes keeps it blocked: deploys run only while
// nothing holds them.
func (f *Driver) waitReady(ctx context.Context, delay, timeout time.Duration, done <-chan struct{}, never bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	wait := func(ch <-chan struct{}, timer <-chan time.Time) error {
		select {
		case <-ch:
		case <-timer:
		case <-deadline.C:
			return errNotReady
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return errClosed
		}
		return nil
	}
	for {
		f.mu.Lock()
		hold := f.holdCh
		f.mu.Unlock()
		if hold == nil {
			break
		}
		if err := wait(hold, nil); err != nil {
			return err
		}
	}
	if never {
		return wait(nil, nil)
	}
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	return wait(nil, t.C)
}

// Delete removes the pod (in a shared driver, for every process); a missing pod is not
// an error.
func (f *Driver) Delete(ctx context.Context, pod warmpool.Pod) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer f.lock()()
	f.deleted = append(f.deleted, pod.ID)
	delete(f.probes, pod.ID)
	f.notifyLocked()
	e, ok, err := f.reg.get(pod.ID)
	if err == nil {
		err = f.reg.remove(pod.ID)
	}
	if err != nil {
		return fmt.Errorf("fake driver: delete %s: %w", pod.ID, err)
	}
	if ok {
		f.reportLocked(e.pod(), true)
	}
	return nil
}

// List returns every pod (in a shared driver, every process's), oldest first, with
// Ready and Dead filled.
func (f *Driver) List(ctx context.Context) ([]warmpool.Pod, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return f.pods()
}

// Probe fails for a missing pod (wrapping warmpool.ErrPodNotFound), a dead or not yet
// ready one, and one given an error with SetProbe.
func (f *Driver) Probe(ctx context.Context, pod warmpool.Pod) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer f.lock()()
	e, ok, err := f.reg.get(pod.ID)
	p := e.pod()
	switch {
	case err != nil:
		return fmt.Errorf("probe %s: %w", pod.ID, err)
	case !ok:
		return fmt.Errorf("probe %s: %w", pod.ID, warmpool.ErrPodNotFound)
	case p.Dead != "":
		return fmt.Errorf("probe %s: pod is dead: %s", pod.ID, p.Dead)
	case !p.Ready:
		return fmt.Errorf("probe %s: pod is not ready", pod.ID)
	}
	return f.probes[pod.ID]
}

func fakeURL(pod, path string) string { return "http://fake.invalid/" + pod + path }
