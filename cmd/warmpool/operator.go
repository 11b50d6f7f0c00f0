package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// operator runs the sub-commands that call a server's HTTP API.
func operator(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	srv := fs.String("server", envOr(getenv, "WARMPOOL_SERVER", "http://127.0.0.1:8080"), "server URL [WARMPOOL_SERVER]")
	token := fs.String("token", cmp.Or(getenv("WARMPOOL_ADMIN_TOKEN"), getenv("WARMPOOL_AUTH_TOKEN")), "bearer token; scope put and sync need the admin token [WARMPOOL_ADMIN_TOKEN, else WARMPOOL_AUTH_TOKEN]")
	file := fs.String("f", "", "scope put: the config file (JSON; - for stdin)")
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
	base := strings.TrimRight(*srv, "/")
	c := client{base: base, token: *token, out: stdout}
	switch {
	case cmd == "scopes" && len(pos) == 0:
		return c.do(ctx, http.MethodGet, "/v1/scopes", nil)
	case cmd == "sync" && len(pos) == 0:
		return c.do(ctx, http.MethodPost, "/v1/config/sync", nil)
	case cmd == "pool" && len(pos) == 1:
		return c.do(ctx, http.MethodGet, "/v1/scopes/"+pos[0]+"/pool", nil)
	case cmd == "scope" && len(pos) == 2 && pos[0] == "get":
		return c.do(ctx, http.MethodGet, "/v1/scopes/"+pos[1]+"/config", nil)
	case cmd == "scope" && len(pos) == 2 && pos[0] == "put":
		if *file == "" {
			return fmt.Errorf("scope put %s: -f FILE is required", pos[1])
		}
		var body []byte
		var err error
		if *file == "-" {
			body, err = io.ReadAll(os.Stdin)
		} else {
			body, err = os.ReadFile(*file)
		}
		if err != nil {
			return err
		}
		return c.do(ctx, http.MethodPut, "/v1/scopes/"+pos[1]+"/config", body)
	}
	fmt.Fprint(stderr, usage)
	return errUsage
}

type client struct {
	base, token string
	out         io.Writer
}

// do calls the API and prints the JSON answer indented; an error answer becomes the
// command's error.
func (c client) do(ctx context.Context, method, path string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
			return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, env.Error.Code, env.Error.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, raw, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(raw)
	}
	fmt.Fprintln(c.out, strings.TrimSpace(pretty.String()))
	return nil
}
