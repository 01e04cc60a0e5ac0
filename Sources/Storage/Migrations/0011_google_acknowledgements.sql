-- Google Play acknowledgements we owe (Jobs/Receipts, GoogleAcknowledgements.swift).
--
-- Google refunds a purchase left unacknowledged for 3 days. A row is written in the same transaction that grants
-- the purchase (with the job's ledger row), so the debt survives a crash or a failed call after the commit; the job
-- then tries once, and GoogleAcknowledgementSweepJob retries every due row until Google's answer or state settles it.
CREATE TABLE google_acknowledgements (
    purchase_token   text PRIMARY KEY,
    package_name     text NOT NULL,
    product_id       text NOT NULL,
    subscription_id  uuid REFERENCES subscriptions (id) ON DELETE SET NULL,
    owed_at          timestamptz NOT NULL DEFAULT now(),
    -- An attempt claims the row by moving this forward (so concurrent attempts do not overlap); due when <= now().
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    -- Set once settled: 'acknowledged' (Google answered 200), 'already_acknowledged' (Google's state says so),
    -- 'not_needed' (Google's state no longer entitles: nothing left to acknowledge).
    settled_at       timestamptz,
    outcome          text CHECK (outcome IN ('acknowledged', 'already_acknowledged', 'not_needed')),
    -- The last failed attempt, without the token (HTTP errors are redacted).
    last_error       text,
    CHECK ((settled_at IS NULL) = (outcome IS NULL))
);

CREATE INDEX google_acknowledgements_due ON google_acknowledgements (next_attempt_at) WHERE settled_at IS NULL;
