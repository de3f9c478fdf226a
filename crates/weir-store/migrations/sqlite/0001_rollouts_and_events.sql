-- weir's SQLite schema, version 1. See crates/weir-store/src/sqlite.rs for the reasoning.
-- Timestamps are RFC 3339 text in UTC, as jiff prints them (full precision, so they read back equal).
-- JSON columns hold serde_json text of weir-core's types.

CREATE TABLE rollouts (
    namespace       TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    -- The Rollout document as applied, without its status.
    document        TEXT    NOT NULL,
    -- The RolloutStatus (authoritative); phase and canary_revision are copies for filtering.
    status          TEXT    NOT NULL,
    phase           TEXT    NOT NULL,
    canary_revision TEXT,
    -- Optimistic concurrency token, bumped by every write except clear_pending.
    version         INTEGER NOT NULL CHECK (version > 0),
    -- Bumped when the spec changes.
    generation      INTEGER NOT NULL CHECK (generation > 0),
    -- JSON array of one-shot effects (hooks, notifications) committed but not yet delivered.
    pending_effects TEXT    NOT NULL DEFAULT '[]',
    last_event_seq  INTEGER NOT NULL DEFAULT 0 CHECK (last_event_seq >= 0),
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE INDEX rollouts_by_phase ON rollouts (phase, namespace, name);

-- Append-only history; seq is 1, 2, 3, ... per rollout without gaps (the store numbers them from
-- rollouts.last_event_seq in the transaction that writes the status).
CREATE TABLE events (
    namespace TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    seq       INTEGER NOT NULL CHECK (seq > 0),
    at        TEXT    NOT NULL,
    run       INTEGER NOT NULL,
    reason    TEXT    NOT NULL,
    event     TEXT    NOT NULL,
    PRIMARY KEY (namespace, name, seq),
    FOREIGN KEY (namespace, name) REFERENCES rollouts (namespace, name) ON DELETE CASCADE
) WITHOUT ROWID;
