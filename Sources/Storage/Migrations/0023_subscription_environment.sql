-- 0023_subscription_environment: where a subscription was bought and who holds it (issue 52 point 3, review
-- 2026-12-07 L-a; Jobs/Receipts, SubscriptionStore.upsert; docs/jobs-receipts.md, "Environment and ownership").
--
-- Sandbox / TestFlight purchases (Apple `environment` other than Production) and Google test purchases
-- (`testPurchase` set) cost nobody anything; a Family Sharing member's entitlement (Apple `inAppOwnershipType`
-- FAMILY_SHARED) is paid on the organiser's own subscription. They still grant the entitlement; revenue and analytics
-- count only `revenue_eligible` rows. Rows from before this migration are NULL in both columns (unknown) and count, as
-- they did; a later store state fills them in.
ALTER TABLE subscriptions
    ADD COLUMN store_environment text,   -- Apple: Production, Sandbox, Xcode, LocalTesting; Google: Production, Test
    ADD COLUMN ownership_type    text,   -- PURCHASED or FAMILY_SHARED (Google: always PURCHASED)
    ADD COLUMN revenue_eligible  boolean NOT NULL GENERATED ALWAYS AS (
        COALESCE(store_environment, 'Production') = 'Production' AND COALESCE(ownership_type, 'PURCHASED') = 'PURCHASED'
    ) STORED;
