-- weir's SQLite schema, version 2: feature flags. See crates/weir-store/src/sqlite/flags.rs.

CREATE TABLE flags (
    namespace  TEXT    NOT NULL,
    -- The flag's key (its metadata.name).
    key        TEXT    NOT NULL,
    -- The Flag document as applied, JSON.
    document   TEXT    NOT NULL,
    -- Optimistic concurrency token, bumped by every change.
    version    INTEGER NOT NULL CHECK (version > 0),
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
