-- Tenants and API keys (invariant 13). Jobs, queues and history keep filing
-- rows under the tenant's name; these tables say which names exist and which
-- keys act for them.

CREATE TABLE tether.tenants (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

-- A key is looked up by its id (the primary key); only the SHA-256 of its
-- secret is stored, never the key.
CREATE TABLE tether.api_keys (
    id         uuid        PRIMARY KEY,
    tenant_id  uuid        NOT NULL REFERENCES tether.tenants (id),
    name       text,
    hash       bytea       NOT NULL CHECK (octet_length(hash) = 32),
    admin      boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON tether.api_keys (tenant_id);
