-- tenant_heads: one row per tenant holding its latest version. A write bumps it first
-- (INSERT ... ON CONFLICT DO UPDATE locks it), so writers of one tenant take turns.
CREATE TABLE tenant_heads (
    tenant_id TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    version   BIGINT NOT NULL CHECK (version >= 1)
);

-- tenant_versions: every write of a tenant's quotas (SPEC §12.1) is a new row: a put
-- holds the quotas, a delete holds NULL.
CREATE TABLE tenant_versions (
    tenant_id   TEXT        COLLATE "C" NOT NULL REFERENCES tenant_heads (tenant_id),
    version     BIGINT      NOT NULL CHECK (version >= 1),
    config_json JSONB,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, version)
);

-- tenant_changes: each tenant's latest write for the config feed, numbered by the
-- counter of config_feed, as scope_changes are.
CREATE TABLE tenant_changes (
    tenant_id TEXT    COLLATE "C" NOT NULL PRIMARY KEY REFERENCES tenant_heads (tenant_id),
    seq       BIGINT  NOT NULL UNIQUE,
    version   BIGINT  NOT NULL CHECK (version >= 1),
    deleted   BOOLEAN NOT NULL
);
