-- The live feed of history events (`GET /v1/events`, invariant 17).
--
-- A reader cannot resume by `seq`: a sequence value is drawn when an event
-- is written and becomes visible when its transaction commits, so 7 can
-- become visible after 8, and a reader that asks for `seq > 8` never sees
-- 7. Each event now records the transaction that wrote it, and a reader
-- keeps the snapshot it last read with: the events it has not read are
-- exactly those whose transaction that snapshot did not see, i.e. those at
-- or past its `xmax` and those of its in-progress list, both found on the
-- index below however long an old transaction stays open (see
-- `tether-postgres/src/feed.rs`).
--
-- Rows written before this migration have no transaction (NULL): every
-- snapshot a reader can hold saw them. The column is added without a
-- default first, so that no existing row is rewritten, then given one for
-- new rows.
ALTER TABLE tether.job_events ADD COLUMN xid xid8;
ALTER TABLE tether.job_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX job_events_xid ON tether.job_events (xid);

-- Retention removes history: a reader that stood before removed events is
-- told (`event: gap`), never left to skip them, and one that had read them
-- is not told. So the transactions whose events retention removed are
-- kept, and a reader's snapshot is checked against them with the same two
-- lookups as the events. To bound the list, all but the newest
-- `feed::PRUNED_KEPT` are folded into `floor`, the newest of them: a
-- reader whose snapshot's `xmin` is not past `floor` (it stood among
-- transactions that long gone) is told of a gap whether it missed one or
-- not.
CREATE TABLE tether.feed_pruned (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    floor xid8
);
INSERT INTO tether.feed_pruned (one, floor) VALUES (true, NULL);
CREATE TABLE tether.feed_pruned_xids (xid xid8 PRIMARY KEY);
