-- Room for a write: after an append failed, the audit trail writes and deletes a row here big
-- enough that an append will fit too, before it accepts requests again.
CREATE TABLE audit_probe (data BLOB NOT NULL);

-- Where the trail starts once retention removed older records: the signed checkpoint
-- (quarry_domain::AuditCheckpoint as JSON), replaced by each prune in the transaction that
-- removes the records.
CREATE TABLE audit_checkpoint (
    id         INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    seq        INTEGER NOT NULL,
    checkpoint TEXT NOT NULL
) STRICT;
