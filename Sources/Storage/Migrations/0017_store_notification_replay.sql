-- 0017_store_notification_replay: notifications kept for a later replay, and Google purchases we cannot attribute
-- (Jobs/Receipts, NotificationJobs.swift, NotificationReplay.swift; docs/jobs-receipts.md).
--
-- A notification for a subscription we do not know yet is recorded 'unmatched' (Apple, or a Google token Google does
-- not know) or 'unattributed' (a Google purchase Google knows but no user of ours can be found for). Such a row keeps
-- what a replay needs, and nothing else: the store's key (Apple original_transaction_id, Google purchase token) and the
-- notification job's arguments. When a validation for that key commits, it enqueues the replay (workers_enqueue, in
-- its own transaction) and clears store_key, so that one validation replays a row once.
ALTER TABLE store_notifications DROP CONSTRAINT store_notifications_outcome_check;
ALTER TABLE store_notifications ADD CONSTRAINT store_notifications_outcome_check
    CHECK (outcome IN ('applied', 'unmatched', 'unattributed', 'ignored', 'stale'));
ALTER TABLE store_notifications
    ADD COLUMN store_key          text,
    ADD COLUMN replay_args        jsonb,
    -- Google: when the purchase was first found unattributable (the job's clock), and when the late alert fired.
    ADD COLUMN unattributed_since timestamptz,
    ADD COLUMN alerted_at         timestamptz;
CREATE INDEX store_notifications_pending_replay ON store_notifications (store, store_key)
    WHERE store_key IS NOT NULL;

-- Out-of-app Google purchases name their buyer by externalAccountIdentifiers.obfuscatedExternalAccountId, which the
-- app sets to the lowercase hex SHA-256 of the user's id as lowercase text (GoogleAccountHash in the Jobs module).
CREATE INDEX users_google_account_hash ON users ((encode(sha256(id::text::bytea), 'hex')));
