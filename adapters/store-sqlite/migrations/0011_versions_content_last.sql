-- A version's content moves to the end of its row. SQLite stores a row's columns in order, and
-- a content larger than a page runs on into a chain of overflow pages: a column stored after it
-- (`created_at`, `seen_seq`) is reached only by walking that chain, a page at a time. Every
-- listing asks for each resource's first sighting, so it read every stored content whole (100
-- contents of 1 MiB: tens of milliseconds with the file in the OS's cache, 100 MiB from disk
-- without); every fresh fetch asks for the latest version's. Rebuilt in the columns' new
-- order, with the same keys and indexes.
CREATE TABLE resource_versions_reordered (
    server       TEXT    NOT NULL,
    uri          TEXT    NOT NULL,
    number       INTEGER NOT NULL,            -- v{number}, from 1, only grows
    digest       BLOB    NOT NULL,            -- SHA-256 of the content bytes
    size         INTEGER NOT NULL,
    mime_type    TEXT,
    is_text      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,            -- unix microseconds, first sighting
    seen_seq     INTEGER NOT NULL,            -- store-wide sighting order: the latest is the max
    content      BLOB,                        -- NULL once retention dropped it; always last
    PRIMARY KEY (server, uri, number),
    UNIQUE (server, uri, digest)
);

INSERT INTO resource_versions_reordered
    (server, uri, number, digest, size, mime_type, is_text, created_at, seen_seq, content)
SELECT server, uri, number, digest, size, mime_type, is_text, created_at, seen_seq, content
FROM resource_versions;

DROP TABLE resource_versions;
ALTER TABLE resource_versions_reordered RENAME TO resource_versions;

CREATE INDEX resource_versions_by_server ON resource_versions (server);
CREATE INDEX resource_versions_by_seen ON resource_versions (seen_seq);
CREATE INDEX resource_versions_latest ON resource_versions (server, uri, seen_seq);
