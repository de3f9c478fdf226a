-- weir's SQLite schema, version 3: API tokens and the server's keys. See
-- crates/weir-store/src/sqlite/tokens.rs.

CREATE TABLE tokens (
    id           INTEGER PRIMARY KEY,
    -- Unique; what the history records as the actor of a change made with the token.
    name         TEXT    NOT NULL UNIQUE,
    -- read, operate, admin or evaluate.
    scope        TEXT    NOT NULL,
    -- A JSON array of namespaces the token is limited to; NULL: every namespace.
    namespaces   TEXT,
    -- SHA-256 of the secret, lower-case hex. The secret itself is never stored.
    secret_hash  TEXT    NOT NULL UNIQUE,
    created_at   TEXT    NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT
);

-- Keys the server creates on its first start and keeps (the session cookie's signing key).
CREATE TABLE server_keys (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;
