-- Store receipts (Jobs/Receipts): notification de-duplication and ordering of store states.

-- One row per store server notification handled (Apple V2 notificationUUID, Google Pub/Sub messageId):
-- a notification delivered again (store retry, Pub/Sub redelivery, job redelivery) finds its row and changes nothing.
CREATE TABLE store_notifications (
    store              text NOT NULL CHECK (store IN ('apple', 'google')),
    notification_id    text NOT NULL,
    notification_type  text NOT NULL,
    subtype            text,
    subscription_id    uuid REFERENCES subscriptions (id) ON DELETE SET NULL,
    outcome            text NOT NULL CHECK (outcome IN ('applied', 'unmatched', 'ignored', 'stale')),
    received_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (store, notification_id)
);

-- When the store asserted the state a subscription row holds (JWS signedDate, or the time we read the store's
-- API). An upsert carrying an older state (a late, out-of-order notification) leaves the row as it is.
ALTER TABLE subscriptions ADD COLUMN store_state_at timestamptz;
