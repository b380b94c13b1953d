-- Every distinct content seen for a resource is one version.
CREATE TABLE resource_versions (
    server       TEXT    NOT NULL,
    uri          TEXT    NOT NULL,
    number       INTEGER NOT NULL,            -- v{number}, from 1, only grows
    digest       BLOB    NOT NULL,            -- SHA-256 of the content bytes
    size         INTEGER NOT NULL,
    mime_type    TEXT,
    is_text      INTEGER NOT NULL,
    content      BLOB,                        -- NULL once retention dropped it
    created_at   INTEGER NOT NULL,            -- unix microseconds, first sighting
    seen_seq     INTEGER NOT NULL,            -- store-wide sighting order: the latest is the max
    PRIMARY KEY (server, uri, number),
    UNIQUE (server, uri, digest)
);

CREATE INDEX resource_versions_by_server ON resource_versions (server);
