-- 0003_probe: rows written by the built-in ProbeInsert job, for the exactly-once tests, the chaos run and the
-- PostgreSQL benchmark. Deliberately no unique key on jid: a job applied twice shows up as two rows.
CREATE TABLE probe_rows (
    id          bigserial PRIMARY KEY,
    jid         text NOT NULL,
    note        text NOT NULL DEFAULT '',
    inserted_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX probe_rows_jid_idx ON probe_rows (jid);
