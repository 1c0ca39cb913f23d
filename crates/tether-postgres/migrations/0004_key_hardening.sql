-- API key hardening: operator keys are marked, keys record when they were
-- last used, and the database remembers which server secret it was first
-- served with.

-- An operator key is one stored from TETHER_ADMIN_KEY at start, not issued
-- through the API. Storing a new one revokes the others (rotation).
ALTER TABLE tether.api_keys ADD COLUMN operator boolean NOT NULL DEFAULT false;

-- When the key last authenticated a request, written at most once a minute
-- per key (not on every request).
ALTER TABLE tether.api_keys ADD COLUMN last_used_at timestamptz;

-- Operator keys stored before this migration: named TETHER_ADMIN_KEY, admin,
-- with a derived id (a UUID v8; issued keys are v4). They were hashed with
-- plain SHA-256 and their id came from a plain SHA-256 of the key, so they
-- can never authenticate again now that both are HMACs under the server
-- secret: they are revoked here, and `tether serve` with the same
-- TETHER_ADMIN_KEY stores the key anew.
UPDATE tether.api_keys
SET operator = true,
    revoked_at = COALESCE(revoked_at, now())
WHERE name = 'TETHER_ADMIN_KEY'
  AND admin
  AND substr(id::text, 15, 1) = '8';

-- At most one row: the HMAC of a fixed label under the server secret (not
-- the secret), stored at the first start. A replica with another secret is
-- refused at start instead of storing operator keys the others cannot
-- verify.
CREATE TABLE tether.server_secret (
    id         smallint    PRIMARY KEY CHECK (id = 1),
    check_hmac bytea       NOT NULL CHECK (octet_length(check_hmac) = 32),
    created_at timestamptz NOT NULL
);
