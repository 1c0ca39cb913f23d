-- Flow control: a queue's limit on running jobs, enforced by the claim.
-- NULL is no limit, so every existing queue keeps claiming as before.
ALTER TABLE tether_queues
    ADD COLUMN max_running INTEGER CHECK (max_running BETWEEN 1 AND 100000);
