-- Quarry's shared store: the same tables as the embedded SQLite store, for several replicas.
-- Timestamps are unix microseconds (BIGINT), as in SQLite, so both stores read alike.

-- Every distinct content seen for a resource is one version.
CREATE TABLE resource_versions (
    server      TEXT    NOT NULL,
    uri         TEXT    NOT NULL,
    number      BIGINT  NOT NULL,             -- v{number}, from 1, only grows
    digest      BYTEA   NOT NULL,             -- SHA-256 of the content bytes
    size        BIGINT  NOT NULL,
    mime_type   TEXT,
    is_text     BOOLEAN NOT NULL,
    content     BYTEA,                        -- NULL once retention dropped it
    created_at  BIGINT  NOT NULL,             -- first sighting
    seen_seq    BIGINT  NOT NULL,             -- store-wide sighting order: the latest is the max
    PRIMARY KEY (server, uri, number),
    UNIQUE (server, uri, digest)
);
CREATE INDEX resource_versions_by_server ON resource_versions (server);
CREATE SEQUENCE resource_versions_seen;

-- Servers registered at runtime (the configuration file's servers are not stored here).
CREATE TABLE servers (
    name           TEXT   PRIMARY KEY,
    id             TEXT   NOT NULL UNIQUE,
    transport      TEXT   NOT NULL,           -- 'stdio' or 'http'
    url            TEXT,
    command        TEXT,
    args           TEXT   NOT NULL,           -- JSON array
    env            TEXT   NOT NULL,           -- JSON object
    cwd            TEXT,
    timeout_ms     BIGINT NOT NULL,
    max_pages      BIGINT NOT NULL,
    retry_attempts BIGINT NOT NULL,
    retry_delay_ms BIGINT NOT NULL,
    pool_size      BIGINT NOT NULL,
    created_at     BIGINT NOT NULL
);

-- Bumped on every change to `servers`, so other replicas notice cheaply; its row lock also
-- orders registry changes.
CREATE TABLE registry_generation (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    generation BIGINT  NOT NULL
);
INSERT INTO registry_generation (singleton, generation) VALUES (1, 0);

-- Idempotency keys, reserved before their mutation runs (result NULL until it completes), so
-- that one mutation runs once across every replica.
CREATE TABLE idempotency (
    scope          TEXT   NOT NULL,           -- the tool
    key            TEXT   NOT NULL,
    payload_digest TEXT   NOT NULL,           -- SHA-256 of the canonical arguments, hex
    result         TEXT,                      -- JSON; NULL while the reservation is held
    reserved_at    BIGINT NOT NULL,
    created_at     BIGINT,                    -- when the result was recorded
    PRIMARY KEY (scope, key)
);

-- The credential vault: sealed records only (AES-256-GCM envelopes made by the cipher; the
-- store never sees plaintext). One credential per server.
CREATE TABLE credentials (
    server      TEXT   PRIMARY KEY,
    server_id   TEXT   NOT NULL,
    auth_type   TEXT   NOT NULL,
    key_id      TEXT   NOT NULL,
    wrapped_key BYTEA  NOT NULL,
    ciphertext  BYTEA  NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- The audit trail: hash-chained records (quarry_domain::chain_material) and the chain's head.
-- Every append locks the head row, writes the record and moves the head in one transaction, so
-- any number of replicas extend one chain.
CREATE TABLE audit_records (
    seq           BIGINT PRIMARY KEY,
    entry         TEXT   NOT NULL,
    previous_hash TEXT   NOT NULL,
    record_hash   TEXT   NOT NULL
);
-- seq 0: the trail is empty.
CREATE TABLE audit_head (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    seq         BIGINT  NOT NULL,
    record_hash TEXT    NOT NULL
);
INSERT INTO audit_head (id, seq, record_hash) VALUES (1, 0, '');

-- Where the trail starts once retention removed older records: the signed checkpoint
-- (quarry_domain::AuditCheckpoint as JSON), replaced by each prune in the transaction that
-- removes the records.
CREATE TABLE audit_checkpoint (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    seq        BIGINT  NOT NULL,
    checkpoint TEXT    NOT NULL
);
