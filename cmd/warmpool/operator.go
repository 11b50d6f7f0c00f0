package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/api"
)

// Exit statuses of the operator commands (SPEC §10, "CLI"); a usage mistake is 2.
const (
	exitRefused      = 1 // the server said no (and none of the cases below)
	exitNotFound     = 3
	exitUnauthorized = 4 // 401 or 403
	exitUnavailable  = 5 // no answer, or 503 / 504
)

// requestTimeout bounds one call of an operator command.
const requestTimeout = 30 * time.Second

// opFlags are the flags every operator command takes.
type opFlags struct {
	server, token, output, file string
	after                       string
	force, all, dryRun          bool
	outputSet                   bool // -o or --output given
	limit, before               optInt
}

// optInt is an integer flag that knows whether it was given.
type optInt struct {
	v   int64
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("want an integer")
	}
	o.v, o.set = v, true
	return nil
}

// operator runs the sub-commands that call a server's HTTP API, and version. scopes is
// the older spelling of scope list, kept working.
func operator(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var f opFlags
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.server, "server", envOr(getenv, "WARMPOOL_SERVER", "http://127.0.0.1:8080"), "server URL [WARMPOOL_SERVER]")
	fs.StringVar(&f.token, "token", cmp.Or(getenv("WARMPOOL_ADMIN_TOKEN"), getenv("WARMPOOL_AUTH_TOKEN")),
		"bearer token; scope get, history, put and delete, sync and tenant need the admin token [WARMPOOL_ADMIN_TOKEN, else WARMPOOL_AUTH_TOKEN]")
	def := defaultOutput(stdout)
	fs.StringVar(&f.output, "o", def, "output format: table, json or yaml (default: table on a terminal, json otherwise)")
	fs.StringVar(&f.output, "output", def, "the same as -o")
	fs.StringVar(&f.file, "f", "", "scope put, tenant put: the config file, JSON or YAML (- for stdin)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "scope put: check the config as a put does and print the pod it would deploy (YAML; JSON with -o json), storing nothing")
	fs.BoolVar(&f.force, "force", false, "scope delete: delete every pod now, busy ones too (their sessions and holds end)")
	fs.Var(&f.limit, "limit", fmt.Sprintf("scope history: `N` versions a page, 1 to %d (default %d; %d with --all); scope list, tenant list: one page of N, 1 to %d (default: every page)",
		warmpool.MaxHistoryLimit, warmpool.DefaultHistoryLimit, warmpool.MaxHistoryLimit, api.MaxScopesLimit))
	fs.StringVar(&f.after, "after", "", "scope list, tenant list: only those after `CURSOR` (the next of the page before)")
	fs.Var(&f.before, "before", "scope history: only versions older than version `V` (the next_before of the page before)")
	fs.BoolVar(&f.all, "all", false, "scope history: follow next_before to the oldest version (default: one page, the newest)")
	// Flags may follow the positional arguments ("scope put NAME -f FILE").
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return parseErr(err)
		}
		args = fs.Args()
		if len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	fs.Visit(func(fl *flag.Flag) { f.outputSet = f.outputSet || fl.Name == "o" || fl.Name == "output" })
	out, err := newPrinter(f.output, stdout)
	if err != nil {
		return err
	}
	c := client{base: strings.TrimRight(f.server, "/"), token: f.token}
	sub := ""
	if len(pos) > 0 {
		sub = pos[0]
	}
	switch {
	case cmd == "version" && len(pos) == 0:
		return out.print(versionInfo(), versionTable)
	case cmd == "scopes" && len(pos) == 0, cmd == "scope" && sub == "list" && len(pos) == 1:
		return c.pages(ctx, out, f, "/v1/scopes", "scopes", scopesTable)
	case cmd == "sync" && len(pos) == 0:
		return c.write(ctx, out, http.MethodPost, "/v1/config/sync", nil, func(v map[string]any) string {
			return fmt.Sprintf("%v scopes published", v["scopes"])
		})
	case cmd == "pool" && len(pos) == 1:
		return c.read(ctx, out, "/v1/scopes/"+url.PathEscape(pos[0])+"/pool", poolTable)
	case cmd == "scope" && sub == "get" && len(pos) == 2:
		return c.read(ctx, out, scopePath(pos[1])+"/config", configTable)
	case cmd == "scope" && sub == "history" && len(pos) == 2:
		return c.history(ctx, out, pos[1], f)
	case cmd == "scope" && sub == "put" && len(pos) == 2:
		body, err := configFile(f.file, "scope put "+pos[1])
		if err != nil {
			return err
		}
		if f.dryRun {
			return c.dryRun(ctx, stdout, f.outputSet && f.output == "json", pos[1], body)
		}
		return c.write(ctx, out, http.MethodPut, scopePath(pos[1])+"/config", body, func(v map[string]any) string {
			return fmt.Sprintf("scope/%s configured: version %v, deploy_ver %v", pos[1], v["version"], v["deploy_ver"])
		})
	case cmd == "scope" && sub == "delete" && len(pos) == 2:
		path := scopePath(pos[1])
		if f.force {
			path += "?force=true"
		}
		return c.write(ctx, out, http.MethodDelete, path, nil, func(v map[string]any) string {
			return fmt.Sprintf("scope/%s deleted: %v pods going", pos[1], v["pods"])
		})
	case cmd == "tenant" && tenantUsage(pos):
		return c.tenant(ctx, out, pos, f)
	case cmd == "session" && sub == "end" && len(pos) == 3:
		return c.write(ctx, out, http.MethodDelete, scopePath(pos[1])+"/sessions/"+url.PathEscape(pos[2]), nil, func(v map[string]any) string {
			if v["released"] == true {
				return fmt.Sprintf("session/%s ended", pos[2])
			}
			return fmt.Sprintf("session/%s was not bound", pos[2])
		})
	}
	_, _ = fmt.Fprint(stderr, usage) // the exit status says usage
	return errUsage
}

func scopePath(scope string) string { return "/v1/scopes/" + url.PathEscape(scope) }

// configFile reads the config of scope put or tenant put (cmd, for the usage error):
// JSON as it is, YAML turned into JSON (a key given twice is refused). The server
// reports every fault of the document.
func configFile(name, cmd string) ([]byte, error) {
	if name == "" {
		return nil, usageError(fmt.Sprintf("%s: -f FILE is required", cmd))
	}
	var raw []byte
	var err error
	if name == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		return raw, nil
	}
	doc, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: not JSON, and as YAML: %w", name, err)
	}
	return doc, nil
}

// client calls a server's HTTP API.
type client struct {
	base, token string
}

// read GETs path and prints the answer; table renders it as a table.
func (c client) read(ctx context.Context, out printer, path string, table func(map[string]any) string) error {
	v, err := c.call(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return out.print(v, table)
}

// history prints one page of a scope's history, newest first, with the next_before
// that fetches the next; with --all it follows next_before to the oldest version and
// prints every version as one answer (without next_before). One page is the default:
// the newest versions are what an operator looks for, and a long history is many
// pages of configs.
func (c client) history(ctx context.Context, out printer, scope string, f opFlags) error {
	q := url.Values{}
	switch {
	case f.limit.set:
		q.Set("limit", f.limit.String())
	case f.all:
		q.Set("limit", strconv.Itoa(warmpool.MaxHistoryLimit))
	}
	var before int64 // the before of the page asked for; 0: the newest
	if f.before.set {
		q.Set("before", f.before.String())
		before = f.before.v
	}
	var all map[string]any
	for {
		path := scopePath(scope) + "/config/history"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		v, err := c.call(ctx, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if !f.all {
			return out.print(v, historyTable)
		}
		all = appendPage(all, v, "versions")
		next := field(v, "next_before")
		if next == "" {
			delete(all, "next_before")
			return out.print(all, historyTable)
		}
		n, err := strconv.ParseInt(next, 10, 64)
		if err != nil || n < 1 || (before != 0 && n >= before) {
			return fmt.Errorf("GET %s: next_before %s does not go back", path, next)
		}
		before = n
		q.Set("before", next)
	}
}

// pages prints a paged list (GET /v1/scopes, GET /v1/tenants), its items under key:
// with --limit one page of them (and its next cursor); otherwise it follows next from
// page to page, api.MaxScopesLimit items each, and prints every item as one answer.
// --after starts after a cursor.
func (c client) pages(ctx context.Context, out printer, f opFlags, list, key string, table func(map[string]any) string) error {
	q := url.Values{}
	q.Set("limit", strconv.Itoa(api.MaxScopesLimit))
	if f.limit.set {
		q.Set("limit", f.limit.String())
	}
	after := f.after
	var all map[string]any
	for {
		path := list + "?" + q.Encode()
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		v, err := c.call(ctx, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if f.limit.set {
			return out.print(v, table)
		}
		all = appendPage(all, v, key)
		next := field(v, "next")
		if next == "" {
			delete(all, "next")
			return out.print(all, table)
		}
		if next <= after {
			return fmt.Errorf("GET %s: next %q does not go forward", path, next)
		}
		after = next
	}
}

// appendPage adds the list under key of the answer v to all, the answers of the
// pages before (nil before the first), and returns it.
func appendPage(all, v map[string]any, key string) map[string]any {
	if all == nil {
		return v
	}
	all[key] = append(list(all, key), list(v, key)...)
	return all
}

// dryRun puts a config with dry_run=true and prints the pod the server answers: as
// YAML, or as JSON when asJSON (-o json given).
func (c client) dryRun(ctx context.Context, stdout io.Writer, asJSON bool, scope string, body []byte) error {
	v, err := c.call(ctx, http.MethodPut, scopePath(scope)+"/config?dry_run=true", body)
	if err != nil {
		return err
	}
	var doc []byte
	if asJSON {
		doc, err = json.MarshalIndent(v["pod"], "", "  ")
		doc = append(doc, '\n')
	} else {
		doc, err = yaml.Marshal(v["pod"])
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(doc)
	return err
}

// write sends a change and prints the answer: as it is in json and yaml, as the line
// summary says in a table.
func (c client) write(ctx context.Context, out printer, method, path string, body []byte, summary func(map[string]any) string) error {
	v, err := c.call(ctx, method, path, body)
	if err != nil {
		return err
	}
	return out.print(v, func(v map[string]any) string { return summary(v) + "\n" })
}

// call sends one request and returns the JSON object answered; an error answer is an
// *apiError, no answer an unavailableError.
func (c client) call(ctx context.Context, method, path string, body []byte) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, usageError(fmt.Sprintf("--server %s: %v", c.base, err))
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, unavailableError{err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, unavailableError{err}
	}
	if resp.StatusCode >= 300 {
		e := &apiError{method: method, path: path, status: resp.StatusCode}
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
			e.code, e.message = env.Error.Code, env.Error.Message
		}
		return nil, e
	}
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s %s: the answer is not a JSON object: %w", method, path, err)
	}
	return v, nil
}

// apiError is an error answer of the server.
type apiError struct {
	method, path  string
	status        int
	code, message string
}

// Error says what the server said; a VALIDATION message listing several faults puts
// each on its own line.
func (e *apiError) Error() string {
	if e.code == "" {
		return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.status, http.StatusText(e.status))
	}
	msg := e.message
	if faults := strings.Split(msg, "; "); e.code == "VALIDATION" && len(faults) > 1 {
		msg = "\n  " + strings.Join(faults, "\n  ")
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.method, e.path, e.status, e.code, msg)
}

func (e *apiError) exitCode() int {
	switch e.status {
	case http.StatusNotFound:
		return exitNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return exitUnauthorized
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return exitUnavailable
	}
	return exitRefused
}

// unavailableError: the server did not answer.
type unavailableError struct{ err error }

func (e unavailableError) Error() string { return "server unavailable: " + e.err.Error() }
func (e unavailableError) Unwrap() error { return e.err }
func (e unavailableError) exitCode() int { return exitUnavailable }

// exitCoder is an error that decides the exit status.
type exitCoder interface{ exitCode() int }
