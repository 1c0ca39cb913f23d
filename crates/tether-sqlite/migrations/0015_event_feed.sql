-- The live feed of history events (`GET /v1/events`, invariant 17). SQLite
-- commits one writer at a time, in the order its `seq` values were drawn
-- (AUTOINCREMENT never reuses one), so a reader resumes after the last
-- `seq` it read and misses nothing. Retention removes history, though: a
-- reader that stood before removed events is told (`event: gap`), never
-- left to skip them. This row keeps the newest `seq` retention removed.
CREATE TABLE tether_feed_pruned (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq INTEGER NOT NULL
) STRICT;
INSERT INTO tether_feed_pruned (one, seq) VALUES (1, 0);
