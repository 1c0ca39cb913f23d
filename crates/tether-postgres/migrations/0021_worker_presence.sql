-- Worker presence: what a worker said of itself when it announced
-- (PUT /v1/workers/{worker_id}), and when it was last seen (its
-- announcement, or a claim: at most every 30 s). GET /v1/workers lists the
-- workers seen within 5 minutes besides those holding running jobs; older
-- rows are forgotten (deleted by the tenant's next announcement).
CREATE TABLE tether.workers (
    tenant       text        NOT NULL,
    worker_id    text        NOT NULL,
    queues       text[]      NOT NULL,
    concurrency  int         NOT NULL,
    sdk          text,
    version      text,
    host         text,
    pid          bigint,
    last_seen_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, worker_id)
);
