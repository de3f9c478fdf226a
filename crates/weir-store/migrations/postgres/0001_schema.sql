-- weir's PostgreSQL schema, version 1: everything SQLite's three migrations hold, plus what
-- several instances sharing one database need (leases, instances, forwarded requests). See
-- crates/weir-store/src/postgres.rs and docs/SCALE-OUT.md for the reasoning.
--
-- Timestamps of weir's own data are RFC 3339 text in UTC, as jiff prints them (full precision, so
-- they read back equal, as on SQLite); lease and heartbeat times are TIMESTAMPTZ from the
-- database's clock. JSON columns hold serde_json text of weir-core's types. Keys collate "C"
-- (bytewise), so listings and cursors order keys as Rust's String does, whatever the database's
-- default collation.

CREATE TABLE rollouts (
    namespace       TEXT COLLATE "C" NOT NULL,
    name            TEXT COLLATE "C" NOT NULL,
    -- The Rollout document as applied, without its status.
    document        TEXT   NOT NULL,
    -- The RolloutStatus (authoritative); phase and canary_revision are copies for filtering.
    status          TEXT   NOT NULL,
    phase           TEXT   NOT NULL,
    canary_revision TEXT,
    -- Optimistic concurrency token, bumped by every write except clear_pending.
    version         BIGINT NOT NULL CHECK (version > 0),
    -- Bumped when the spec changes.
    generation      BIGINT NOT NULL CHECK (generation > 0),
    -- JSON array of one-shot effects (hooks, notifications) committed but not yet delivered.
    pending_effects TEXT   NOT NULL DEFAULT '[]',
    last_event_seq  BIGINT NOT NULL DEFAULT 0 CHECK (last_event_seq >= 0),
    created_at      TEXT   NOT NULL,
    updated_at      TEXT   NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE INDEX rollouts_by_phase ON rollouts (phase, namespace, name);

-- Append-only history; seq is 1, 2, 3, ... per rollout without gaps (numbered from
-- rollouts.last_event_seq under the rollout row's lock, in the transaction that writes the status).
CREATE TABLE events (
    namespace TEXT COLLATE "C" NOT NULL,
    name      TEXT COLLATE "C" NOT NULL,
    seq       BIGINT NOT NULL CHECK (seq > 0),
    at        TEXT   NOT NULL,
    run       BIGINT NOT NULL,
    reason    TEXT   NOT NULL,
    event     TEXT   NOT NULL,
    PRIMARY KEY (namespace, name, seq),
    FOREIGN KEY (namespace, name) REFERENCES rollouts (namespace, name) ON DELETE CASCADE
);

CREATE TABLE flags (
    namespace  TEXT COLLATE "C" NOT NULL,
    -- The flag's key (its metadata.name).
    key        TEXT COLLATE "C" NOT NULL,
    -- The Flag document as applied, JSON.
    document   TEXT   NOT NULL,
    -- Optimistic concurrency token, bumped by every change.
    version    BIGINT NOT NULL CHECK (version > 0),
    created_at TEXT   NOT NULL,
    updated_at TEXT   NOT NULL,
    PRIMARY KEY (namespace, key)
);

CREATE TABLE tokens (
    id           BIGSERIAL PRIMARY KEY,
    -- Unique; what the history records as the actor of a change made with the token.
    name         TEXT COLLATE "C" NOT NULL UNIQUE,
    -- read, operate, admin or evaluate.
    scope        TEXT NOT NULL,
    -- A JSON array of namespaces the token is limited to; NULL: every namespace.
    namespaces   TEXT,
    -- SHA-256 of the secret, lower-case hex. The secret itself is never stored.
    secret_hash  TEXT NOT NULL UNIQUE,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT
);

-- Keys the server creates on its first start and keeps (the session cookie's signing key).
CREATE TABLE server_keys (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);

-- One row per rollout, created and deleted with it: which instance drives it (src/cluster.rs).
CREATE TABLE leases (
    namespace   TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    owner       TEXT,                       -- instance id; NULL: unowned
    epoch       BIGINT NOT NULL DEFAULT 0,  -- bumped by every claim
    host        TEXT,                       -- host label a local rollout is bound to; NULL: any
    acquired_at TIMESTAMPTZ,
    renewed_at  TIMESTAMPTZ,
    expires_at  TIMESTAMPTZ,                -- lease times use the database clock (clock_timestamp())
    PRIMARY KEY (namespace, name),
    FOREIGN KEY (namespace, name) REFERENCES rollouts (namespace, name) ON DELETE CASCADE
);
CREATE INDEX leases_by_owner ON leases (owner);

-- Instances that joined the cluster, with their last heartbeat.
CREATE TABLE instances (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    api        TEXT,
    started_at TIMESTAMPTZ NOT NULL,
    seen_at    TIMESTAMPTZ NOT NULL
);

CREATE TABLE requests (              -- forwarded to a rollout's owner; no FK (a delete request
    id           BIGSERIAL PRIMARY KEY,  -- must outlive its rollout)
    namespace    TEXT COLLATE "C" NOT NULL,
    name         TEXT COLLATE "C" NOT NULL,
    body         TEXT NOT NULL,      -- JSON
    submitted_by TEXT NOT NULL,
    submitted_at TIMESTAMPTZ NOT NULL,
    executed_at  TIMESTAMPTZ,        -- set by the commit that executed it (CommitItem::request)
    answer       TEXT,               -- JSON; set once by answer_request
    answered_at  TIMESTAMPTZ
);
CREATE INDEX requests_unanswered ON requests (namespace, name) WHERE answer IS NULL;
