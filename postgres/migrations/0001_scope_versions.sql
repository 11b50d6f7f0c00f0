-- scope_heads: one row per scope holding its latest version. A Put bumps this row
-- first (INSERT ... ON CONFLICT DO UPDATE locks it), so writers of one scope take
-- turns on it, in any replica, and each gets the previous version + 1.
-- COLLATE "C": scope ids sort by their bytes, whatever the database's locale.
CREATE TABLE scope_heads (
    scope_id TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    version  BIGINT NOT NULL CHECK (version >= 1)
);

-- Every Put is a new row: the history of a scope is its rows in version order. The
-- primary key (scope_id, version) makes a duplicate version impossible and is the
-- index behind Get, History and List (each a join with scope_heads).
CREATE TABLE scope_versions (
    scope_id    TEXT        COLLATE "C" NOT NULL REFERENCES scope_heads (scope_id),
    version     BIGINT      NOT NULL CHECK (version >= 1),
    deploy_ver  TEXT        NOT NULL,
    config_json JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope_id, version)
);
