-- tenant_versions: every write of a tenant's quotas (SPEC §12.1) is a new row: a put
-- holds the quotas as JSON, a delete holds NULL. The primary key (tenant_id, version)
-- is the index behind the latest version of one tenant and of every tenant.
CREATE TABLE tenant_versions (
    tenant_id   TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version >= 1),
    config_json TEXT    CHECK (config_json IS NULL OR json_valid(config_json)),
    created_at  INTEGER NOT NULL, -- unix milliseconds
    PRIMARY KEY (tenant_id, version)
) STRICT;
-- tenant_changes: each tenant's latest write for the config feed, numbered in the one
-- sequence of scope_changes (a write takes MAX(seq) + 1 over both tables).
CREATE TABLE tenant_changes (
    tenant_id TEXT    NOT NULL PRIMARY KEY,
    seq       INTEGER NOT NULL UNIQUE,
    version   INTEGER NOT NULL CHECK (version >= 1),
    deleted   INTEGER NOT NULL CHECK (deleted IN (0, 1))
) STRICT;
