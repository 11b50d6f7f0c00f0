-- scope_deletions: a scope deleted at a version. The scope is deleted while its latest
-- version (scope_heads) is no newer than that one: Get and List leave it out, History
-- keeps every version, and the next Put (one version on) makes it live again.
CREATE TABLE scope_deletions (
    scope_id TEXT   COLLATE "C" NOT NULL PRIMARY KEY REFERENCES scope_heads (scope_id),
    version  BIGINT NOT NULL CHECK (version >= 1)
);
