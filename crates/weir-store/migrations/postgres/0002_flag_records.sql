-- weir's PostgreSQL schema, migration 2: what is kept about flags beside them (issue 33). See
-- crates/weir-store/src/postgres/flag_records.rs.

-- Every change of a flag, kept after the flag is deleted.
CREATE TABLE flag_history (
    id         BIGSERIAL PRIMARY KEY,
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    at         TEXT    NOT NULL,
    -- A token's name, `rollout NAMESPACE/NAME`, `trigger ID`.
    actor      TEXT    NOT NULL,
    -- created, updated, deleted, enabled, disabled, triggered, rollout.
    action     TEXT    NOT NULL,
    -- The flag's version after the change; NULL: deleted.
    version    BIGINT,
    -- The caller's address (a trigger's use).
    address    TEXT,
    -- A JSON array of {path, before, after}.
    changes    TEXT    NOT NULL
);
CREATE INDEX flag_history_by_flag ON flag_history (namespace, key, id);

-- Evaluations per flag, variation and minute (Unix seconds / 60); minutes older than a day pruned.
CREATE TABLE flag_evaluations (
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    variation  TEXT    NOT NULL,
    minute     BIGINT NOT NULL,
    count      BIGINT NOT NULL CHECK (count >= 0),
    PRIMARY KEY (namespace, key, minute, variation)
);
CREATE INDEX flag_evaluations_by_minute ON flag_evaluations (minute);

-- Secret URLs that turn a flag on or off. Only the secret's SHA-256 is kept.
CREATE TABLE flag_triggers (
    id           TEXT    PRIMARY KEY,
    namespace    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    -- on or off.
    action       TEXT    NOT NULL,
    description  TEXT    NOT NULL,
    secret_hash  TEXT    NOT NULL,
    created_by   TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    last_used_at TEXT,
    uses         BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX flag_triggers_by_flag ON flag_triggers (namespace, key);
