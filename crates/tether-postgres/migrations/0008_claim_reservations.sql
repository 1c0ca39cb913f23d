-- Flow control: the slots a claim of a queue with `max_running` or a rate
-- limit reserved in its short turn on the queue row, until the claim itself
-- (which runs beside other claims) replaces the reservation with running
-- jobs and logged claims. A reservation counts as both meanwhile; one whose
-- claim never came (its process died) lapses at `expires_at` and is deleted
-- by the next turn.
CREATE TABLE tether.claim_reservations (
    id uuid PRIMARY KEY,
    tenant text NOT NULL,
    queue text NOT NULL,
    at timestamptz NOT NULL,
    jobs integer NOT NULL CHECK (jobs > 0),
    expires_at timestamptz NOT NULL
);
CREATE INDEX claim_reservations_queue ON tether.claim_reservations (tenant, queue);
