-- Migration 0021 up, handwritten: the tables of the RLQS server's PostgreSQL store (sql/src/tables.sql).
CREATE TABLE rl.quota_bucket (
    key           bytea  PRIMARY KEY,
    bucket_id     bytea  NOT NULL,
    fill          bigint NOT NULL,
    fill_interval bigint NOT NULL,
    burst         bigint NOT NULL
);

CREATE TABLE rl.quota_client (
    key         bytea   NOT NULL REFERENCES rl.quota_bucket (key) ON DELETE CASCADE,
    client      text    NOT NULL,
    seq         bigint  NOT NULL,
    demand      bigint  NOT NULL,
    used        bigint  NOT NULL,
    denied      bigint  NOT NULL,
    since       bigint  NOT NULL,
    starved     boolean NOT NULL,
    last_report bigint  NOT NULL,
    last_usage  bigint  NOT NULL,
    sent_fill   bigint  NOT NULL,
    sent_tokens bigint  NOT NULL,
    prev_fill   bigint  NOT NULL,
    prev_tokens bigint  NOT NULL,
    sent_at     bigint  NOT NULL,
    acked       boolean NOT NULL,
    unsent      boolean NOT NULL,
    refreshed   bigint  NOT NULL,
    gone        boolean NOT NULL,
    PRIMARY KEY (key, client)
);
