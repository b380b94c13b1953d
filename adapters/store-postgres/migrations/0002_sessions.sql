-- The HTTP transport's sessions (MCP 2025-11-25), so that any replica can take one over: keyed
-- by a digest of the session id (never the id), with the agent that opened it, the client's
-- initialize parameters and what it subscribed to.
CREATE TABLE sessions (
    key        TEXT   PRIMARY KEY,
    owner      TEXT   NOT NULL,
    initialize TEXT   NOT NULL,
    last_used  BIGINT NOT NULL
);

CREATE INDEX sessions_by_last_used ON sessions (last_used);

CREATE TABLE session_subscriptions (
    key TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    uri TEXT NOT NULL,
    PRIMARY KEY (key, uri)
);
