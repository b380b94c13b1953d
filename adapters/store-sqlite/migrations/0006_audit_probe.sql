-- Room for a write: after an append failed, the audit trail writes and deletes a row here big
-- enough that an append will fit too, before it accepts requests again.
CREATE TABLE audit_probe (data BLOB NOT NULL);
