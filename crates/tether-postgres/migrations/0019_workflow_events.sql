-- Workflow events in the history and the event stream (invariant 17):
-- `workflow_created`, written with the batch that creates a workflow, and
-- `workflow_finished`, written when the end of a job leaves none of its
-- workflow's jobs unfinished. Both are events of a job (the first job of
-- the batch; the job whose end finished the workflow, after that end's own
-- event), so the feed reads, filters and orders them as any other.
--
-- "None left unfinished" must be seen by exactly one of two transactions
-- that end a workflow's last two jobs at once, though each sees the
-- other's job still running until it commits. A lock per workflow taken
-- at every end makes it exact: the end looks again in a statement of its
-- own, whose snapshot, under READ COMMITTED, sees what the lock's previous
-- holder committed, so of two last ends the second to take the lock sees
-- both. But it queues every end of one workflow's jobs behind the previous
-- one's commit (a wide workflow completed one job per transaction ran at
-- 0.4 of as many independent jobs). So the lock is skipped when another
-- job of the workflow is running and nobody is changing it now (`FOR
-- SHARE SKIP LOCKED`): it is share-locked until this transaction commits,
-- so whoever ends it writes after this commit and looks after it too.
-- (Not a queued job: claims skip a locked row, and a queued job can be
-- claimed and ended before this commit. Not a waiting one: its release
-- may be waited for below, by this very transaction.) `workflow_finishes` holds the workflows whose
-- finish was announced, so it is announced once; a retry or replay of one
-- of its jobs removes it, and its next finish is announced again.
CREATE TABLE tether.workflow_finishes (workflow_id uuid PRIMARY KEY);

-- The unfinished jobs of each workflow: "is any left" is one index probe
-- however many of its jobs have ended. Jobs outside workflows are not in
-- it and cost it nothing.
CREATE INDEX jobs_workflow_unfinished ON tether.jobs (workflow_id)
    WHERE workflow_id IS NOT NULL AND state IN ('waiting', 'queued', 'running');

-- Workflows that had finished before this migration are not announced.
INSERT INTO tether.workflow_finishes (workflow_id)
SELECT w.id FROM tether.workflows w
WHERE NOT EXISTS (SELECT 1 FROM tether.jobs j
                  WHERE j.workflow_id = w.id AND j.state IN ('waiting', 'queued', 'running'));

-- For each workflow in `of_workflows` (repeated once per job) whose jobs
-- `ended` just ended: when none of its jobs is left unfinished and its
-- finish is not announced, writes `workflow_finished` (the detail is the
-- workflow's state) as an event of the last of those jobs. Also called at
-- a workflow's creation, whose jobs may all have ended at once.
CREATE FUNCTION tether.announce_finished_workflows(of_workflows uuid[], ended uuid[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    flow uuid;
    last_job uuid;
BEGIN
    FOR flow IN SELECT DISTINCT x FROM unnest(of_workflows) AS x ORDER BY 1 LOOP
        -- (The list names `jobs_workflow_unfinished`'s rows.)
        PERFORM 1 FROM tether.jobs j
        WHERE j.workflow_id = flow AND j.state IN ('waiting', 'queued', 'running')
          AND j.state = 'running'
        LIMIT 1 FOR SHARE SKIP LOCKED;
        CONTINUE WHEN FOUND;
        -- 0x74657404: the advisory lock class of workflow finishes.
        PERFORM pg_advisory_xact_lock(1952805892, hashtext(flow::text));
        CONTINUE WHEN EXISTS (SELECT 1 FROM tether.jobs j
                              WHERE j.workflow_id = flow
                                AND j.state IN ('waiting', 'queued', 'running'));
        INSERT INTO tether.workflow_finishes (workflow_id) VALUES (flow) ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        SELECT x.job INTO last_job FROM unnest(of_workflows, ended) AS x(workflow, job)
        WHERE x.workflow = flow ORDER BY x.job DESC LIMIT 1;
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT j.id, j.tenant, now(), 'workflow_finished', j.attempt,
               (SELECT CASE WHEN bool_or(k.state = 'failed') THEN 'failed'
                            WHEN bool_or(k.state = 'cancelled') THEN 'cancelled'
                            ELSE 'succeeded' END
                FROM tether.jobs k WHERE k.workflow_id = flow)
        FROM tether.jobs j WHERE j.id = last_job;
    END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION tether.dependencies_ended() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    reopened uuid[];
    ended_workflows uuid[];
    ended_jobs uuid[];
    candidates uuid[];
    ended_ids uuid[];
    ended_states text[];
    marked uuid[];
    notified bigint;
BEGIN
    -- Workflows first (only statements that moved a workflow's jobs): a
    -- job that this statement's cascade below cancels ends in a statement
    -- of its own, which announces what it finishes.
    IF EXISTS (SELECT 1 FROM ended_after n WHERE n.workflow_id IS NOT NULL) THEN
        SELECT array_agg(DISTINCT n.workflow_id) FILTER (WHERE NOT n.ended),
               array_agg(n.workflow_id ORDER BY n.workflow_id, n.id) FILTER (WHERE n.ended),
               array_agg(n.id ORDER BY n.workflow_id, n.id) FILTER (WHERE n.ended)
        INTO reopened, ended_workflows, ended_jobs
        FROM (
            SELECT n.workflow_id, n.id,
                   n.state IN ('succeeded', 'failed', 'cancelled') AS ended
            FROM ended_after n JOIN ended_before o ON o.id = n.id
            WHERE n.workflow_id IS NOT NULL
              AND (n.state IN ('succeeded', 'failed', 'cancelled'))
                  <> (o.state IN ('succeeded', 'failed', 'cancelled'))
        ) n;
        IF reopened IS NOT NULL THEN
            DELETE FROM tether.workflow_finishes WHERE workflow_id = ANY (reopened);
        END IF;
        IF ended_workflows IS NOT NULL THEN
            PERFORM tether.announce_finished_workflows(ended_workflows, ended_jobs);
        END IF;
    END IF;

    -- Most statements end no job that others wait for: one pass over the
    -- new rows tells.
    SELECT array_agg(n.id) INTO candidates
    FROM ended_after n
    WHERE n.has_dependents AND n.state IN ('succeeded', 'failed', 'cancelled');
    IF candidates IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id ORDER BY n.id), array_agg(n.state ORDER BY n.id)
    INTO ended_ids, ended_states
    FROM ended_after n JOIN ended_before o ON o.id = n.id
    WHERE n.id = ANY (candidates) AND o.state IS DISTINCT FROM n.state;
    IF ended_ids IS NULL THEN
        RETURN NULL;
    END IF;

    -- A failure or cancellation cancels the jobs that wait for it with
    -- `cancel` and, through one recursive query, all that wait with
    -- `cancel` downstream of them. Their own `run` dependents count them
    -- when this trigger fires again for the cancelling statement.
    IF 'failed' = ANY (ended_states) OR 'cancelled' = ANY (ended_states) THEN
        WITH RECURSIVE doomed (id, dependency, dependency_state) AS (
            SELECT w.id, e.id, e.state
            FROM unnest(ended_ids, ended_states) AS e(id, state)
            CROSS JOIN LATERAL (
                SELECT job_id FROM tether.job_dependencies
                WHERE depends_on = e.id AND NOT met
                OFFSET 0
            ) d
            CROSS JOIN LATERAL (
                SELECT id FROM tether.jobs
                WHERE id = d.job_id
                  AND state || '' = 'waiting' AND dependency_failure = 'cancel'
            ) w
            WHERE e.state <> 'succeeded'
          UNION
            SELECT w.id, x.id, 'cancelled'
            FROM doomed x
            CROSS JOIN LATERAL (
                SELECT job_id FROM tether.job_dependencies
                WHERE depends_on = x.id AND NOT met
                OFFSET 0
            ) d
            CROSS JOIN LATERAL (
                SELECT id FROM tether.jobs
                WHERE id = d.job_id
                  AND state || '' = 'waiting' AND dependency_failure = 'cancel'
            ) w
        ),
        chosen AS MATERIALIZED (
            SELECT DISTINCT ON (id) * FROM doomed ORDER BY id, dependency
        ),
        locked AS MATERIALIZED (
            SELECT w.id FROM tether.jobs w
            WHERE w.id = ANY (ARRAY(SELECT id FROM chosen))
            ORDER BY w.id
            FOR NO KEY UPDATE
        ),
        cancelled AS (
            UPDATE tether.jobs w
            SET state = 'cancelled', waiting_on = 0, finished_at = now(), updated_at = now()
            FROM chosen x
            WHERE w.id = ANY (ARRAY(SELECT id FROM locked)) AND w.id = x.id
              AND w.state || '' = 'waiting'
            RETURNING w.id, w.tenant, w.attempt, w.updated_at, x.dependency, x.dependency_state
        )
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT id, tenant, updated_at, 'cancelled', attempt,
               '{"dependency":"' || dependency || '","state":"' || dependency_state || '"}'
        FROM cancelled;
    END IF;

    -- Each waiting job that counts these ends (successes; any end with
    -- `run`) has its edges from them marked met. Its row is locked first,
    -- in id order, so that two statements counting for the same jobs meet
    -- in one order, and the second sees what the first marked.
    WITH edges AS MATERIALIZED (
        SELECT d.edge, d.job_id, e.state AS dependency_state
        FROM unnest(ended_ids, ended_states) AS e(id, state)
        CROSS JOIN LATERAL (
            SELECT ctid AS edge, job_id FROM tether.job_dependencies
            WHERE depends_on = e.id AND NOT met
            OFFSET 0
        ) d
    ),
    locked AS MATERIALIZED (
        SELECT w.id, w.dependency_failure FROM tether.jobs w
        WHERE w.id = ANY (ARRAY(SELECT DISTINCT job_id FROM edges))
          AND w.state || '' = 'waiting'
        ORDER BY w.id
        FOR NO KEY UPDATE
    ),
    counting AS MATERIALIZED (
        SELECT x.edge
        FROM edges x JOIN locked l ON l.id = x.job_id
        WHERE x.dependency_state = 'succeeded' OR l.dependency_failure = 'run'
    ),
    counted AS (
        UPDATE tether.job_dependencies d SET met = true
        WHERE d.ctid = ANY (ARRAY(SELECT edge FROM counting))
          AND NOT d.met
        RETURNING d.job_id
    )
    SELECT array_agg(DISTINCT job_id) INTO marked FROM counted;
    IF marked IS NULL THEN
        RETURN NULL;
    END IF;

    -- Those with no unmet edge left are queued (`released`). A new
    -- statement, so a new snapshot: taken while this transaction holds
    -- their locks, it sees every edge that another transaction marked
    -- before it let go of them.
    WITH ready AS MATERIALIZED (
        SELECT w.id
        FROM unnest(marked) AS m(id)
        CROSS JOIN LATERAL (
            SELECT id FROM tether.jobs WHERE id = m.id AND state || '' = 'waiting'
        ) w
        LEFT JOIN LATERAL (
            SELECT 1 AS one FROM tether.job_dependencies
            WHERE job_id = w.id AND NOT met
            LIMIT 1 OFFSET 0
        ) unmet ON true
        WHERE unmet.one IS NULL
    ),
    moved AS (
        UPDATE tether.jobs w
        SET waiting_on = 0, state = 'queued', updated_at = now()
        WHERE w.id = ANY (ARRAY(SELECT id FROM ready))
          AND w.state || '' = 'waiting'
        RETURNING w.id, w.tenant, w.queue, w.attempt, w.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'released', attempt FROM moved
    )
    -- The wake-up hint (see notify.rs), delivered at commit.
    SELECT count(pg_notify('tether_jobs', r.tenant || ' ' || r.queue || ' ' || r.n))
    INTO notified
    FROM (SELECT tenant, queue, count(*) AS n FROM moved GROUP BY tenant, queue) r;
    RETURN NULL;
END
$fn$;
