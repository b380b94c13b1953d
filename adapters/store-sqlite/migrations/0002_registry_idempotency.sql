-- Servers registered at runtime (the configuration file's servers are not stored here).
CREATE TABLE servers (
    name           TEXT    PRIMARY KEY,
    id             TEXT    NOT NULL UNIQUE,
    transport      TEXT    NOT NULL,          -- 'stdio' or 'http'
    url            TEXT,
    command        TEXT,
    args           TEXT    NOT NULL,          -- JSON array
    env            TEXT    NOT NULL,          -- JSON object
    cwd            TEXT,
    timeout_ms     INTEGER NOT NULL,
    max_pages      INTEGER NOT NULL,
    retry_attempts INTEGER NOT NULL,
    retry_delay_ms INTEGER NOT NULL,
    pool_size      INTEGER NOT NULL,
    created_at     INTEGER NOT NULL
);

-- Bumped on every change to `servers`, so other processes notice cheaply.
CREATE TABLE registry_generation (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    generation INTEGER NOT NULL
);
INSERT INTO registry_generation (singleton, generation) VALUES (1, 0);

-- The first result of each mutation per idempotency key.
CREATE TABLE idempotency (
    scope          TEXT    NOT NULL,          -- the tool
    key            TEXT    NOT NULL,
    payload_digest TEXT    NOT NULL,
    result         TEXT    NOT NULL,          -- JSON
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
