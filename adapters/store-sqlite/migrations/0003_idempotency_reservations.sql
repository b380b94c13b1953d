-- Idempotency keys are reserved before their mutation runs (result NULL until it completes), so
-- that one mutation runs once across every process sharing this file.
CREATE TABLE idempotency_v2 (
    scope          TEXT    NOT NULL,          -- the tool
    key            TEXT    NOT NULL,
    payload_digest TEXT    NOT NULL,          -- SHA-256 of the canonical arguments, hex
    result         TEXT,                      -- JSON; NULL while the reservation is held
    reserved_at    INTEGER NOT NULL,          -- unix microseconds
    created_at     INTEGER,                   -- unix microseconds, when the result was recorded
    PRIMARY KEY (scope, key)
);
INSERT INTO idempotency_v2 (scope, key, payload_digest, result, reserved_at, created_at)
    SELECT scope, key, payload_digest, result, created_at, created_at FROM idempotency;
DROP TABLE idempotency;
ALTER TABLE idempotency_v2 RENAME TO idempotency;
