-- 0001_ledger: the job ledger.
-- A job's database effects and its ledger row commit in one transaction (Storage.JobLedger.runOnce);
-- a redelivered job whose row exists is acknowledged without running its effects again.

CREATE TABLE job_ledger (
    jid         text PRIMARY KEY,              -- Sidekiq job id: the unique key that makes a job run once
    job_class   text NOT NULL,
    queue       text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz                    -- set in the same transaction, just before COMMIT
);

-- Retention sweep: DELETE ... WHERE finished_at < cutoff.
CREATE INDEX job_ledger_finished_at_idx ON job_ledger (finished_at);
