-- Tenants and API keys on SQLite, mirroring
-- crates/tether-postgres/migrations/0002_tenants_keys.sql. Jobs, queues and
-- history keep filing rows under the tenant's name; these tables say which
-- names exist and which keys act for them.

CREATE TABLE tether_tenants (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;

-- A key is looked up by its id (the primary key); only the SHA-256 of its
-- secret is stored, never the key.
CREATE TABLE tether_api_keys (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tether_tenants (id),
    name       TEXT,
    hash       BLOB    NOT NULL CHECK (length(hash) = 32),
    admin      INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;
CREATE INDEX tether_api_keys_tenant ON tether_api_keys (tenant_id);
