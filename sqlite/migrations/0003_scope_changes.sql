-- scope_changes: each scope's latest write (a Put, or a Delete: deleted = 1) under the
-- number of the change it was committed as, for the config feed (Store.Follow): a
-- follower reads the rows numbered past the last one it saw. A write holds the
-- database's write lock from its first statement (BEGIN IMMEDIATE), so numbers are
-- taken in commit order and no row appears behind one already read. The UNIQUE index
-- on seq is what a read and the next number (MAX(seq) + 1) use.
CREATE TABLE scope_changes (
    scope_id TEXT    NOT NULL PRIMARY KEY,
    seq      INTEGER NOT NULL UNIQUE,
    version  INTEGER NOT NULL CHECK (version >= 1),
    deleted  INTEGER NOT NULL CHECK (deleted IN (0, 1))
) STRICT;
