-- Google Play cancellations we owe because of an account deletion (Jobs/Receipts, GoogleCancellations.swift;
-- docs/jobs-privacy.md, "The store subscription"). Issue 52 point 1.
--
-- A row is written in the transaction that records the fact: `stop_renewals` by `DeletionRequestedJob` (the deletion
-- was requested: Google's USER_REQUESTED_STOP_RENEWALS, which the user can undo in the Play Store) and
-- `stop_payments` by the erasure itself (AccountDeletionJob's transaction: DEVELOPER_REQUESTED_STOP_PAYMENTS, which
-- cannot be undone). GoogleAcknowledgementSweepJob pays every due row until `subscriptionsv2.get` shows that the
-- subscription renews no more. The purchase token is kept only while the row is owed: settling drops it.
CREATE TABLE google_cancellations (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('stop_renewals', 'stop_payments')),
    -- The deletion request that owes it (its audit entry receives the erasure's outcome counts).
    request_id       uuid NOT NULL REFERENCES deletion_requests (id),
    subscription_id  uuid REFERENCES subscriptions (id) ON DELETE SET NULL,
    -- NULL once settled (no personal identifier kept longer than the debt).
    purchase_token   text,
    -- Known when the purchase's acknowledgement recorded it; else the only configured package is used.
    package_name     text,
    owed_at          timestamptz NOT NULL DEFAULT now(),
    -- An attempt claims the row by moving this forward (by the receipt jobs' clock); due when <= that clock.
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    -- 'cancelled': Google accepted the cancel and its state then showed no further renewal; 'already_ended': Google's
    -- state showed no further renewal without our call (or refused it for that reason); 'withdrawn': the deletion
    -- request was withdrawn before a stop_renewals was sent; 'superseded': a stop_renewals still owed when the
    -- erasure owed the stop_payments for the same purchase.
    settled_at       timestamptz,
    outcome          text CHECK (outcome IN ('cancelled', 'already_ended', 'withdrawn', 'superseded')),
    -- The last failed attempt, without the token.
    last_error       text,
    CHECK ((settled_at IS NULL) = (outcome IS NULL)),
    CHECK (settled_at IS NULL OR purchase_token IS NULL),
    CHECK (settled_at IS NOT NULL OR purchase_token IS NOT NULL)
);

-- One owed row per purchase and kind.
CREATE UNIQUE INDEX google_cancellations_owed ON google_cancellations (purchase_token, kind) WHERE settled_at IS NULL;
CREATE INDEX google_cancellations_due ON google_cancellations (next_attempt_at) WHERE settled_at IS NULL;
CREATE INDEX google_cancellations_request ON google_cancellations (request_id);

-- When an erasure detached the row from its user, and when a renewal landing on it afterwards was alerted (once).
ALTER TABLE subscriptions ADD COLUMN detached_at timestamptz;
ALTER TABLE subscriptions ADD COLUMN detached_renewal_alerted_at timestamptz;
