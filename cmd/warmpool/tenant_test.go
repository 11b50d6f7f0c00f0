package main

import (
	"strings"
	"testing"
)

// tenant put, get, list and delete against a replica: YAML and JSON files, each
// format, pages, and the exit statuses of a refusal, a missing tenant, a gateway
// token and a usage mistake.
func TestTenantCommands(t *testing.T) {
	c := newCLI(t, "gw", "adm")
	c.env["WARMPOOL_ADMIN_TOKEN"] = "adm"
	acme := writeFile(t, "acme.yaml", "max_pods: 10\nmax_cpu: \"4\"\nmax_memory: 8Gi\nweight: 3\n")
	beta := writeFile(t, "beta.json", `{"max_sessions":5}`)

	if out := c.ok("tenant", "put", "acme", "-f", acme, "-o", "table"); out != "tenant/acme configured: version 1\n" {
		t.Fatalf("tenant put (table): %q", out)
	}
	var put struct {
		Tenant  string `json:"tenant"`
		Version int    `json:"version"`
	}
	c.json(&put, "tenant", "put", "beta", "-f", beta)
	if put.Tenant != "beta" || put.Version != 1 {
		t.Fatalf("tenant put (json): %+v", put)
	}

	var got struct {
		Tenant string `json:"tenant"`
		Config struct {
			MaxMemory string `json:"max_memory"`
			Weight    int    `json:"weight"`
		} `json:"config"`
		Use struct {
			Pods   int    `json:"pods"`
			Memory string `json:"memory"`
		} `json:"use"`
		Share float64 `json:"share"`
	}
	c.json(&got, "tenant", "get", "acme")
	if got.Tenant != "acme" || got.Config.MaxMemory != "8Gi" || got.Config.Weight != 3 || got.Use.Pods != 0 || got.Use.Memory != "0" || got.Share != 0.75 {
		t.Fatalf("tenant get: %+v", got)
	}
	table := c.ok("tenant", "get", "acme", "-o", "table")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "TENANT") ||
		strings.Join(strings.Fields(lines[1]), " ") != "acme 1 3 0.75 0/10 0/4 0/8Gi 0/- 0/-" {
		t.Fatalf("tenant get -o table:\n%s", table)
	}

	var all struct {
		Tenants []struct {
			Tenant string `json:"tenant"`
		} `json:"tenants"`
		Next any `json:"next"`
	}
	c.json(&all, "tenant", "list")
	if len(all.Tenants) != 2 || all.Tenants[0].Tenant != "acme" || all.Tenants[1].Tenant != "beta" || all.Next != nil {
		t.Fatalf("tenant list: %+v", all)
	}
	if table := c.ok("tenant", "list", "--limit", "1", "-o", "table"); !strings.Contains(table, "next acme: more tenants follow (tenant list --after acme") {
		t.Fatalf("tenant list --limit 1 -o table:\n%s", table)
	}
	c.json(&all, "tenant", "list", "--after", "acme")
	if len(all.Tenants) != 1 || all.Tenants[0].Tenant != "beta" {
		t.Fatalf("tenant list --after acme: %+v", all)
	}

	if out := c.ok("tenant", "delete", "beta", "-o", "table"); !strings.HasPrefix(out, "tenant/beta quotas deleted: version 2") {
		t.Fatalf("tenant delete (table): %q", out)
	}
	c.fails(exitNotFound, []string{"tenant", "delete", "beta"}, "404 TENANT_NOT_FOUND")
	c.fails(exitNotFound, []string{"tenant", "get", "nobody"}, "TENANT_NOT_FOUND")
	bad := writeFile(t, "bad.json", `{"weight":0,"max_cpu":"lots","colour":1}`)
	c.fails(exitRefused, []string{"tenant", "put", "acme", "-f", bad}, "400 VALIDATION", "colour")
	zero := writeFile(t, "zero.json", `{"weight":0,"max_cpu":"lots"}`)
	c.fails(exitRefused, []string{"tenant", "put", "acme", "-f", zero}, "400 VALIDATION", "weight", "max_cpu")
	c.fails(exitRefused, []string{"tenant", "get", "BAD"}, "400 VALIDATION")
	for _, args := range [][]string{{"tenant", "list"}, {"tenant", "get", "acme"}, {"tenant", "put", "acme", "-f", beta}, {"tenant", "delete", "acme"}} {
		c.fails(exitUnauthorized, append(args, "--token", "gw"), "403 FORBIDDEN")
	}
	for _, args := range [][]string{{"tenant"}, {"tenant", "get"}, {"tenant", "put", "acme"}, {"tenant", "list", "x"}, {"tenant", "frobnicate", "a"}, {"tenant", "delete", "a", "b"}} {
		c.fails(2, args)
	}
}
