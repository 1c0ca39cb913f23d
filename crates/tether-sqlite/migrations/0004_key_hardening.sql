-- API key hardening on SQLite, mirroring
-- crates/tether-postgres/migrations/0004_key_hardening.sql: operator keys are
-- marked, keys record when they were last used, and the database remembers
-- which server secret it was first served with.

-- An operator key is one stored from TETHER_ADMIN_KEY at start, not issued
-- through the API. Storing a new one revokes the others (rotation).
ALTER TABLE tether_api_keys
    ADD COLUMN operator INTEGER NOT NULL DEFAULT 0 CHECK (operator IN (0, 1));

-- When the key last authenticated a request (milliseconds since the epoch),
-- written at most once a minute per key (not on every request).
ALTER TABLE tether_api_keys ADD COLUMN last_used_at INTEGER;

-- Operator keys stored before this migration: named TETHER_ADMIN_KEY, admin,
-- with a derived id (a UUID v8; issued keys are v4). They were hashed with
-- plain SHA-256 and their id came from a plain SHA-256 of the key, so they
-- can never authenticate again now that both are HMACs under the server
-- secret: they are revoked here, and `tether serve` with the same
-- TETHER_ADMIN_KEY stores the key anew.
UPDATE tether_api_keys
SET operator = 1,
    revoked_at = COALESCE(revoked_at, CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER))
WHERE name = 'TETHER_ADMIN_KEY'
  AND admin = 1
  AND substr(id, 15, 1) = '8';

-- At most one row: the HMAC of a fixed label under the server secret (not
-- the secret), stored at the first start. A replica with another secret is
-- refused at start instead of storing operator keys the others cannot
-- verify.
CREATE TABLE tether_server_secret (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    check_hmac BLOB    NOT NULL CHECK (length(check_hmac) = 32),
    created_at INTEGER NOT NULL
) STRICT;
