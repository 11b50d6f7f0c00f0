-- scope_deletions: a scope deleted at a version. The scope is deleted while its latest
-- version is no newer than that one: Get and List leave it out, History keeps every
-- version, and the next Put (one version on) makes it live again.
CREATE TABLE scope_deletions (
    scope_id TEXT    NOT NULL PRIMARY KEY,
    version  INTEGER NOT NULL CHECK (version >= 1)
) STRICT;
