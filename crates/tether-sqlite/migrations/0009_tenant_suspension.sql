-- Suspended tenants, mirroring
-- crates/tether-postgres/migrations/0011_tenant_suspension.sql: while
-- suspended_at (Unix milliseconds) is set the tenant's keys authenticate
-- nothing (403), its schedules do not fire and an admin acting for it may
-- only read. NULL (every existing tenant) is active.
ALTER TABLE tether_tenants ADD COLUMN suspended_at INTEGER;
