-- Every Put is a new row: the history of a scope is its rows in version order.
-- The primary key (scope_id, version) makes a duplicate version impossible and is the
-- index behind Get (latest of one scope), History and List (latest of every scope).
CREATE TABLE scope_versions (
    scope_id    TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version >= 1),
    deploy_ver  TEXT    NOT NULL,
    config_json TEXT    NOT NULL CHECK (json_valid(config_json)),
    created_at  INTEGER NOT NULL, -- unix milliseconds
    PRIMARY KEY (scope_id, version)
) STRICT;
