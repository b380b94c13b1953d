-- The credential vault: sealed records only (AES-256-GCM envelopes made by the cipher; the
-- store never sees plaintext). One credential per server.
CREATE TABLE credentials (
    server      TEXT PRIMARY KEY NOT NULL,
    server_id   TEXT NOT NULL,
    auth_type   TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    wrapped_key BLOB NOT NULL,
    ciphertext  BLOB NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;
