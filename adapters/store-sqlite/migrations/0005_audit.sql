-- The audit trail: hash-chained records (quarry_domain::chain_material), and the chain's head,
-- written in the same transaction as each record so that writers never fork the chain and a
-- deleted last record is seen.
CREATE TABLE audit_records (
    seq           INTEGER PRIMARY KEY NOT NULL,
    entry         TEXT NOT NULL,
    previous_hash TEXT NOT NULL,
    record_hash   TEXT NOT NULL
) STRICT;

CREATE TABLE audit_head (
    id          INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    seq         INTEGER NOT NULL,
    record_hash TEXT NOT NULL
) STRICT;
