-- config_feed: the one row whose counter numbers the writes for the config feed
-- (Store.Follow). A write bumps it as its last step before commit, which locks the
-- row until then: writes take numbers in commit order (writers of different scopes
-- wait for one another for that last step and the commit), so a follower reading the
-- changes numbered past the last one it saw never misses one committed behind it.
CREATE TABLE config_feed (
    one BOOLEAN NOT NULL PRIMARY KEY DEFAULT TRUE CHECK (one),
    seq BIGINT  NOT NULL
);
INSERT INTO config_feed (one, seq) VALUES (TRUE, 0);

-- scope_changes: each scope's latest write (a Put, or a Delete) under its number.
CREATE TABLE scope_changes (
    scope_id TEXT    COLLATE "C" NOT NULL PRIMARY KEY REFERENCES scope_heads (scope_id),
    seq      BIGINT  NOT NULL UNIQUE,
    version  BIGINT  NOT NULL CHECK (version >= 1),
    deleted  BOOLEAN NOT NULL
);
