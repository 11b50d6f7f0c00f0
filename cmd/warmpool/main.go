// Command warmpool is the warm-pod manager: the service (serve), the stand-in agent
// (demo-agent), operator sub-commands over the HTTP API and the load tester (loadtest).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/warmpool/warmpool/demoagent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal the default action is back: a second one stops the
		// process at once instead of waiting for the drain.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on w (unless the usage text was printed already) and returns
// the exit status: 0 without an error, 2 for a usage mistake, the status an operator
// command's error names (3 not found, 4 unauthorized or forbidden, 5 unavailable), 1
// otherwise.
func exitCode(err error, w io.Writer) int {
	if err == nil {
		return 0
	}
	if err != errUsage {
		_, _ = fmt.Fprintln(w, "warmpool:", err) // the exit status still says it failed
	}
	var ue usageError
	if errors.Is(err, errUsage) || errors.As(err, &ue) {
		return 2
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.exitCode()
	}
	return 1
}

// errUsage: the usage text was printed already.
var errUsage = errors.New("usage")

// usageError is a mistake in how the command was called, said in one line.
type usageError string

func (e usageError) Error() string { return string(e) }

// envOr returns the env var's value, or def when it is unset.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// parseErr turns a flag parse error into the command's result: -h is a success, the
// flag package has printed what was wrong otherwise.
func parseErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return errUsage
}

const usage = `warmpool — warm pools of agent pods, and sessions routed to them.

usage:
  warmpool serve [flags]             the service (see 'warmpool serve -h')
  warmpool demo-agent [flags]        the stand-in agent pods run
  warmpool loadtest [flags]          load-test a replica on this machine (see 'warmpool loadtest -h')
  warmpool version                   this binary's version

operator commands, over the HTTP API:
  warmpool scope list [--limit N] [--after CURSOR]
                                     every scope with pod and session counts, page after
                                     page (also: scopes); --limit: one page of N (up to
                                     500) and its next cursor, --after: from a cursor on
  warmpool scope get NAME            a scope's stored config
  warmpool scope put NAME -f FILE    store a scope config (JSON or YAML; - for stdin);
                                     --dry-run prints the pod it would deploy instead
  warmpool scope history NAME [--limit N] [--before V] [--all]
                                     a scope's stored config versions, newest first: one
                                     page (50; --limit up to 500) and its next_before,
                                     older ones with --before, every page with --all
  warmpool scope delete NAME [--force]
                                     delete a scope: it takes no new session; idle pods go
                                     now, busy ones when their sessions end (--force: now)
  warmpool session end SCOPE SESSION end a session
  warmpool pool NAME                 a scope's pods, deploys, followers and waiters
  warmpool sync                      publish every stored scope to Redis
  warmpool tenant list [--limit N] [--after CURSOR]
                                     every tenant with quotas, its use and share, page
                                     after page (--limit, --after as for scope list)
  warmpool tenant get NAME           a tenant's quotas, use and share
  warmpool tenant put NAME -f FILE   store a tenant's quotas (JSON or YAML; - for stdin):
                                     max_pods, max_cpu, max_memory, max_sessions,
                                     max_idle_pods, weight; a field left out sets no limit
  warmpool tenant delete NAME        remove a tenant's quotas (its scopes keep naming it)

Operator commands and loadtest take --server URL (WARMPOOL_SERVER, default http://127.0.0.1:8080)
and --token TOKEN (WARMPOOL_ADMIN_TOKEN, else WARMPOOL_AUTH_TOKEN; scope get, history, put
and delete, sync and tenant need the admin token when the server has one). Operator
commands and version take -o table|json|yaml: table by default on a terminal, json
otherwise.

exit status: 0 ok, 1 refused by the server, 2 usage, 3 not found, 4 unauthorized or
forbidden, 5 server unavailable.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		_, _ = fmt.Fprint(stderr, usage) // the exit status says usage
		return errUsage
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "serve":
		return serve(ctx, rest, getenv, stdout, stderr)
	case "demo-agent":
		return demoagent.Main(ctx, rest, stdout, stderr)
	case "scope", "scopes", "pool", "sync", "session", "tenant", "version":
		return operator(ctx, cmd, rest, getenv, stdout, stderr)
	case "loadtest":
		return loadtestCmd(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "--help":
		_, err := fmt.Fprint(stdout, usage)
		return err
	}
	_, _ = fmt.Fprintf(stderr, "warmpool: unknown command %q\n\n%s", cmd, usage) // the exit status says usage
	return errUsage
}
