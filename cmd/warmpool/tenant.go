package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// tenantUsage says whether pos are the arguments of a tenant command: list, or get,
// put or delete of one tenant.
func tenantUsage(pos []string) bool {
	switch {
	case len(pos) == 1:
		return pos[0] == "list"
	case len(pos) == 2:
		return pos[0] == "get" || pos[0] == "put" || pos[0] == "delete"
	}
	return false
}

// tenant runs warmpool tenant list|get|put|delete (SPEC §12.1), whose arguments
// tenantUsage accepted.
func (c client) tenant(ctx context.Context, out printer, pos []string, f opFlags) error {
	if pos[0] == "list" {
		return c.pages(ctx, out, f, "/v1/tenants", "tenants", tenantsTable)
	}
	name := pos[1]
	path := "/v1/tenants/" + url.PathEscape(name)
	switch pos[0] {
	case "get":
		return c.read(ctx, out, path, func(v map[string]any) string {
			return tabulate(tenantHeader, [][]string{tenantRow(v)})
		})
	case "put":
		body, err := configFile(f.file, "tenant put "+name)
		if err != nil {
			return err
		}
		return c.write(ctx, out, http.MethodPut, path, body, func(v map[string]any) string {
			return fmt.Sprintf("tenant/%s configured: version %v", name, v["version"])
		})
	default:
		return c.write(ctx, out, http.MethodDelete, path, nil, func(v map[string]any) string {
			return fmt.Sprintf("tenant/%s quotas deleted: version %v; its scopes have no limit now", name, v["version"])
		})
	}
}

var tenantHeader = []string{"TENANT", "VERSION", "WEIGHT", "SHARE", "PODS", "CPU", "MEMORY", "SESSIONS", "IDLE_PODS"}

// tenantRow is a tenant as a table row: each quota as use/limit, "-" for no limit.
func tenantRow(t any) []string {
	quota := func(use, limit string) string {
		l := field(t, "config", limit)
		if l == "" {
			l = "-"
		}
		return field(t, "use", use) + "/" + l
	}
	return []string{field(t, "tenant"), field(t, "version"), field(t, "config", "weight"), field(t, "share"),
		quota("pods", "max_pods"), quota("cpu", "max_cpu"), quota("memory", "max_memory"),
		quota("sessions", "max_sessions"), quota("idle_pods", "max_idle_pods")}
}

// tenantsTable lists a page of tenants, and says how to fetch the next page.
func tenantsTable(v map[string]any) string {
	var rows [][]string
	for _, t := range list(v, "tenants") {
		rows = append(rows, tenantRow(t))
	}
	t := tabulate(tenantHeader, rows)
	if next := field(v, "next"); next != "" {
		t += fmt.Sprintf("\nnext %s: more tenants follow (tenant list --after %s, or without --limit for all)\n", next, next)
	}
	return t
}
