-- Suspended tenants: an admin stops a tenant without deleting anything.
-- While suspended_at is set the tenant's keys authenticate nothing (403),
-- its schedules do not fire and an admin acting for it may only read. NULL
-- (every existing tenant) is active. A nullable column without a default:
-- adding it rewrites nothing.
ALTER TABLE tether.tenants ADD COLUMN suspended_at timestamptz;
