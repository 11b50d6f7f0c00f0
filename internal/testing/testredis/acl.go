package testredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Tests on a real Redis run warmpool's code as the ACL user the README tells operators
// to create, with exactly the README's `ACL SETUSER warmpool …` line: a command
// warmpool sends that the line does not allow fails its test with NOPERM. Set-up,
// inspection and cleanup that need more (SCAN, FLUSHDB, DEBUG, CLIENT PAUSE, CONFIG …)
// use a connection as the default user.

const (
	// ACLUser is the user the README's ACL line creates.
	ACLUser = "warmpool"
	// ACLPassword is the password tests give that user in place of the line's PASSWORD.
	ACLPassword = "warmpool-tests"
)

var aclLinePattern = regexp.MustCompile(`(?m)^ACL SETUSER warmpool .*$`)

// aclLine returns the README's `ACL SETUSER warmpool …` line, read from README.md at
// the root of the module the tests run in.
func aclLine() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return "", err
	}
	line := aclLinePattern.Find(readme)
	if line == nil {
		return "", errors.New("README.md has no line starting `ACL SETUSER warmpool `")
	}
	return string(line), nil
}

// setUser runs the README's ACL line on c (a connection allowed to change ACLs) for a
// deployment whose --prefix is prefix, as the README tells its operators to: the user
// is named user, its password is ACLPassword, and its key and channel patterns are
// prefix's instead of wp:'s. Running it again leaves the same user.
func setUser(ctx context.Context, c *redis.Client, user, prefix string) error {
	line, err := aclLine()
	if err != nil {
		return err
	}
	fields := strings.Fields(line)
	args := make([]any, 0, len(fields))
	for i, f := range fields {
		switch {
		case i == 2:
			f = user
		case f == "~wp:*" || f == "&wp:*":
			f = f[:1] + prefix + "*"
		}
		args = append(args, strings.ReplaceAll(f, "PASSWORD", ACLPassword))
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%s: %w", line, err)
	}
	return nil
}

// moduleRoot is the nearest directory, from the working directory up, with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// commandsRefused is an error naming each command the ACL user was refused on the
// servers admin reaches (their ACL LOG, reason "command"), nil when none was; the log
// of a server that shows one is reset, so the next test is not failed for it again. A
// client that gets NOPERM sees its test fail; this catches the refusals no caller sees,
// such as the COMMAND that go-redis's cluster client sends for its routing table, which
// it only logs and sends again before the next command, and those of the processes a
// test starts.
func commandsRefused(ctx context.Context, admin redis.UniversalClient) error {
	var refused []string
	err := forEachServer(ctx, admin, func(ctx context.Context, c *redis.Client) error {
		entries, err := c.ACLLog(ctx, 128).Result()
		if err != nil {
			return err
		}
		n := len(refused)
		for _, e := range entries {
			if e.Username == ACLUser && e.Reason == "command" {
				refused = append(refused, fmt.Sprintf("%s (%d times on %s)", e.Object, e.Count, c.Options().Addr))
			}
		}
		if len(refused) > n {
			return c.ACLLogReset(ctx).Err()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ACL LOG: %w", err)
	}
	if len(refused) > 0 {
		return fmt.Errorf("the README's ACL line refused %s to the %s user: add them to the line", strings.Join(refused, ", "), ACLUser)
	}
	return nil
}
