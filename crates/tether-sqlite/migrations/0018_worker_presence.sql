-- Worker presence: what a worker said of itself when it announced
-- (PUT /v1/workers/{worker_id}), and when it was last seen (its
-- announcement, or a claim: at most every 30 s; epoch milliseconds).
-- GET /v1/workers lists the workers seen within 5 minutes besides those
-- holding running jobs; older rows are forgotten (deleted by the tenant's
-- next announcement). `queues` is a JSON array of names.
CREATE TABLE tether_workers (
    tenant       TEXT    NOT NULL,
    worker_id    TEXT    NOT NULL,
    queues       TEXT    NOT NULL,
    concurrency  INTEGER NOT NULL,
    sdk          TEXT,
    version      TEXT,
    host         TEXT,
    pid          INTEGER,
    last_seen_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, worker_id)
) STRICT, WITHOUT ROWID;
