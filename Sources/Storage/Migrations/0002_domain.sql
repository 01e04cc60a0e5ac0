-- 0002_domain: the tables the jobs read and write, named after the use-case document
-- (shared/seeds/004_*.txt: Auth, Subscription, Offline/Geolocation and Ads services).
--
-- Conventions: ids are uuid (DEFAULT gen_random_uuid(), the seed's uuid_generate_v4() without the
-- extension); times are timestamptz; money is numeric; enumerations are text with a CHECK constraint.
-- `app_id` identifies the client application (the Auth Service's `applications` table, not stored here).

-- ---------------------------------------------------------------------------------------------------
-- Auth Service
-- ---------------------------------------------------------------------------------------------------

CREATE TABLE users (
    id                         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id                     uuid NOT NULL,
    email                      text,
    email_verified             boolean NOT NULL DEFAULT false,
    password_hash              text,
    first_name                 text,
    last_name                  text,
    display_name               text,
    auth_provider              text NOT NULL DEFAULT 'email'
                               CHECK (auth_provider IN ('google', 'apple', 'email', 'guest')),
    google_id                  text,
    apple_id                   text,
    status                     text NOT NULL DEFAULT 'free' CHECK (status IN ('free', 'premium', 'suspended')),
    subscription_id            uuid,          -- FK to subscriptions, added below
    is_guest                   boolean NOT NULL DEFAULT false,
    guest_expires_at           timestamptz,
    login_attempts             integer NOT NULL DEFAULT 0,
    locked_until               timestamptz,
    last_login                 timestamptz,
    -- Account deletion (GDPR Art. 17): requested, executed 30 days later unless cancelled.
    delete_requested           boolean NOT NULL DEFAULT false,
    delete_scheduled_at        timestamptz,
    delete_cancellation_token  uuid,
    anonymized_at              timestamptz,   -- set when the deletion job removed the PII
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_app_google_id_key ON users (app_id, google_id) WHERE google_id IS NOT NULL;
CREATE UNIQUE INDEX users_app_apple_id_key ON users (app_id, apple_id) WHERE apple_id IS NOT NULL;
CREATE UNIQUE INDEX users_app_email_key ON users (app_id, lower(email)) WHERE email IS NOT NULL;
-- Deletion sweep: due requests.
CREATE INDEX users_delete_due_idx ON users (delete_scheduled_at) WHERE delete_requested;
-- Expired guest accounts sweep.
CREATE INDEX users_guest_expiry_idx ON users (guest_expires_at) WHERE is_guest;

CREATE TABLE privacy_settings (
    id                        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id                   uuid NOT NULL UNIQUE REFERENCES users (id) ON DELETE CASCADE,
    consent_analytics         boolean NOT NULL DEFAULT false,
    consent_third_party       boolean NOT NULL DEFAULT false,
    consent_geolocation       boolean NOT NULL DEFAULT false,
    consent_personalized_ads  boolean NOT NULL DEFAULT false,
    consent_notifications     boolean NOT NULL DEFAULT false,
    consent_game_center       boolean NOT NULL DEFAULT false,
    updated_at                timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE oauth_connections (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id           uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider          text NOT NULL CHECK (provider IN ('google', 'apple')),
    provider_user_id  text NOT NULL,
    access_token      text,              -- encrypted by the Auth Service; never exported
    refresh_token     text,              -- encrypted by the Auth Service; never exported
    profile_data      jsonb,
    connected_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, provider_user_id)
);
CREATE INDEX oauth_connections_user_idx ON oauth_connections (user_id);

CREATE TABLE game_center_connections (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    player_id  text NOT NULL UNIQUE,
    alias      text,
    linked_at  timestamptz NOT NULL DEFAULT now(),
    last_sync  timestamptz
);
CREATE INDEX game_center_connections_user_idx ON game_center_connections (user_id);

CREATE TABLE refresh_tokens (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash  text NOT NULL UNIQUE,
    device_info jsonb,
    expires_at  timestamptz NOT NULL,
    revoked     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refresh_tokens_user_idx ON refresh_tokens (user_id);
-- Cleanup sweep: expired or revoked tokens.
CREATE INDEX refresh_tokens_expires_at_idx ON refresh_tokens (expires_at);

CREATE TABLE audit_logs (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid REFERENCES users (id) ON DELETE SET NULL,
    app_id      uuid,
    action      text NOT NULL,
    ip_address  text,
    user_agent  text,
    result      text NOT NULL DEFAULT 'success',
    details     jsonb,
    "timestamp" timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_logs_user_time_idx ON audit_logs (user_id, "timestamp");

-- GDPR export requests (Art. 15/20). The job fills file_path/url/expires_at and sends one email.
CREATE TABLE privacy_exports (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id           uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'processing', 'ready', 'failed', 'expired')),
    schema_version    integer,
    file_path         text,
    size_bytes        bigint,
    url               text,
    expires_at        timestamptz,
    email_intent_at   timestamptz,       -- set before sending: a crash after it does not send twice blindly
    email_sent_at     timestamptz,
    email_message_id  text,
    error             text,
    requested_at      timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    file_deleted_at   timestamptz
);
CREATE INDEX privacy_exports_user_idx ON privacy_exports (user_id);
-- Expired-files sweep.
CREATE INDEX privacy_exports_status_expires_idx ON privacy_exports (status, expires_at);

-- Account deletion requests (history; the current state is mirrored on users.delete_*).
CREATE TABLE deletion_requests (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    reason        text,
    token         uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),   -- cancellation token (email link)
    requested_at  timestamptz NOT NULL DEFAULT now(),
    scheduled_at  timestamptz NOT NULL,
    cancelled_at  timestamptz,
    completed_at  timestamptz
);
CREATE INDEX deletion_requests_user_idx ON deletion_requests (user_id);
-- Daily safety-net sweep: due, neither cancelled nor completed.
CREATE INDEX deletion_requests_due_idx ON deletion_requests (scheduled_at)
    WHERE cancelled_at IS NULL AND completed_at IS NULL;

-- ---------------------------------------------------------------------------------------------------
-- Subscription Service
-- ---------------------------------------------------------------------------------------------------

CREATE TABLE subscription_plans (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id               uuid NOT NULL,
    name                 text NOT NULL,
    plan_type            text NOT NULL,               -- 'monthly', 'annual', ...
    apple_product_id     text,
    google_product_id    text,
    price                numeric(10, 2) NOT NULL,
    currency             text NOT NULL DEFAULT 'EUR',
    trial_enabled        boolean NOT NULL DEFAULT false,
    trial_duration_days  integer NOT NULL DEFAULT 0,
    features             jsonb NOT NULL DEFAULT '{}'::jsonb,
    active               boolean NOT NULL DEFAULT true,
    created_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app_id, plan_type)
);
CREATE UNIQUE INDEX subscription_plans_apple_product_key ON subscription_plans (app_id, apple_product_id)
    WHERE apple_product_id IS NOT NULL;
CREATE UNIQUE INDEX subscription_plans_google_product_key ON subscription_plans (app_id, google_product_id)
    WHERE google_product_id IS NOT NULL;

CREATE TABLE subscriptions (
    id                             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id                         uuid NOT NULL,
    user_id                        uuid REFERENCES users (id) ON DELETE SET NULL,   -- kept for accounting
    plan_id                        uuid REFERENCES subscription_plans (id),
    plan_type                      text NOT NULL,
    status                         text NOT NULL
                                   CHECK (status IN ('pending', 'trial', 'active', 'grace_period', 'on_hold',
                                                     'paused', 'cancelled', 'expired', 'refunded')),
    start_date                     timestamptz NOT NULL,
    end_date                       timestamptz,
    trial_end_date                 timestamptz,
    grace_period_end               timestamptz,
    auto_renew                     boolean NOT NULL DEFAULT true,
    store                          text NOT NULL CHECK (store IN ('apple', 'google')),
    store_product_id               text NOT NULL,
    store_transaction_id           text NOT NULL UNIQUE,   -- upsert key (ON CONFLICT (store_transaction_id))
    store_original_transaction_id  text,
    store_receipt                  text,
    price                          numeric(10, 2),
    currency                       text,
    cancelled_at                   timestamptz,
    created_at                     timestamptz NOT NULL DEFAULT now(),
    updated_at                     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscriptions_user_idx ON subscriptions (user_id, created_at);
CREATE INDEX subscriptions_original_transaction_idx ON subscriptions (store_original_transaction_id);
-- Expiry sweep: live subscriptions past their end date.
CREATE INDEX subscriptions_live_end_date_idx ON subscriptions (end_date)
    WHERE status IN ('trial', 'active', 'grace_period');

ALTER TABLE users ADD CONSTRAINT users_subscription_id_fkey
    FOREIGN KEY (subscription_id) REFERENCES subscriptions (id) ON DELETE SET NULL;

CREATE TABLE subscription_events (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    subscription_id  uuid NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    event_type       text NOT NULL,      -- trial_started, subscription_started, renewed, expired, refunded...
    event_data       jsonb,
    idempotency_key  text UNIQUE,        -- e.g. store notification id: the same event is recorded once
    "timestamp"      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscription_events_subscription_idx ON subscription_events (subscription_id, "timestamp");

CREATE TABLE iap_receipts (
    id                       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id                   uuid NOT NULL,
    user_id                  uuid REFERENCES users (id) ON DELETE SET NULL,
    subscription_id          uuid REFERENCES subscriptions (id) ON DELETE SET NULL,
    store                    text NOT NULL CHECK (store IN ('apple', 'google')),
    receipt_data             text,
    transaction_id           text,
    original_transaction_id  text,
    product_id               text,
    purchase_date            timestamptz,
    expiration_date          timestamptz,
    is_trial                 boolean NOT NULL DEFAULT false,
    is_active                boolean NOT NULL DEFAULT false,
    validated                boolean NOT NULL DEFAULT false,
    validation_date          timestamptz,
    validation_status        integer,   -- Apple verifyReceipt status (0 = valid, 21xxx otherwise)
    validation_error         text,      -- readable reason of an invalid receipt (RCV-<status>, ...)
    created_at               timestamptz NOT NULL DEFAULT now()
);
-- One receipt row per store transaction: ON CONFLICT (store, transaction_id) WHERE transaction_id IS NOT NULL.
CREATE UNIQUE INDEX iap_receipts_store_transaction_key ON iap_receipts (store, transaction_id)
    WHERE transaction_id IS NOT NULL;
CREATE INDEX iap_receipts_user_idx ON iap_receipts (user_id);
CREATE INDEX iap_receipts_subscription_idx ON iap_receipts (subscription_id);

-- Credits ledger kept by the Subscription Service (positive = earned, negative = spent).
CREATE TABLE credit_transactions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id          uuid REFERENCES users (id) ON DELETE SET NULL,
    amount           integer NOT NULL CHECK (amount <> 0),
    balance_after    integer,
    source           text NOT NULL,      -- 'ad_reward', 'promo', 'purchase', 'unlock', ...
    reference        text,
    idempotency_key  text UNIQUE,        -- the credit of a reward is recorded once however often it is sent
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_transactions_user_idx ON credit_transactions (user_id, created_at);

-- ---------------------------------------------------------------------------------------------------
-- Offline & Geolocation Service
-- ---------------------------------------------------------------------------------------------------

CREATE TABLE user_locations (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id        uuid REFERENCES users (id) ON DELETE CASCADE,   -- NULL once anonymised (90 days)
    latitude       double precision NOT NULL,
    longitude      double precision NOT NULL,
    accuracy       double precision,                                -- meters
    altitude       double precision,
    source         text NOT NULL CHECK (source IN ('gps', 'wifi', 'cell', 'ip')),
    country_code   text,
    country        text,
    city           text,
    geocoded_at    timestamptz,
    geocode_error  text,          -- last failure; country/city stay NULL (a valid end state)
    anonymized_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX user_locations_user_idx ON user_locations (user_id, created_at);
-- Nightly anonymisation sweep: rows older than 90 days still tied to a user.
CREATE INDEX user_locations_created_at_idx ON user_locations (created_at) WHERE anonymized_at IS NULL;

-- Reverse-geocoding cache (24 h), keyed by a rounded coordinate cell.
CREATE TABLE geocode_cache (
    cell_key      text PRIMARY KEY,
    country_code  text,
    country       text,
    city          text,
    fetched_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX geocode_cache_fetched_at_idx ON geocode_cache (fetched_at);

-- Quiz history and achievements (part of the GDPR export).
CREATE TABLE quiz_history (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id          uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    app_id           uuid NOT NULL,
    category_id      text,
    score            integer NOT NULL DEFAULT 0,
    total_questions  integer NOT NULL DEFAULT 0,
    played_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quiz_history_user_idx ON quiz_history (user_id, played_at);

CREATE TABLE user_achievements (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id         uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    achievement_id  text NOT NULL,
    unlocked_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, achievement_id)
);

-- ---------------------------------------------------------------------------------------------------
-- Ads Service
-- ---------------------------------------------------------------------------------------------------

CREATE TABLE ad_requests (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id      uuid NOT NULL,
    user_id     uuid REFERENCES users (id) ON DELETE SET NULL,
    ad_type     text NOT NULL CHECK (ad_type IN ('rewarded', 'interstitial', 'banner')),
    placement   text NOT NULL DEFAULT '',
    provider    text NOT NULL,
    ad_unit_id  text,
    filled      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ad_requests_app_created_idx ON ad_requests (app_id, created_at);
CREATE INDEX ad_requests_created_at_idx ON ad_requests (created_at);

CREATE TABLE ad_views (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    ad_request_id        uuid REFERENCES ad_requests (id) ON DELETE SET NULL,
    app_id               uuid NOT NULL,
    user_id              uuid REFERENCES users (id) ON DELETE SET NULL,
    ad_type              text NOT NULL CHECK (ad_type IN ('rewarded', 'interstitial', 'banner')),
    provider             text NOT NULL,
    placement            text NOT NULL DEFAULT '',
    display_duration_ms  integer,
    ad_clicked           boolean NOT NULL DEFAULT false,
    ad_completed         boolean NOT NULL DEFAULT false,
    reward_granted       boolean NOT NULL DEFAULT false,
    revenue_usd          numeric(12, 6),       -- NULL when the network did not report it: estimated from eCPM
    created_at           timestamptz NOT NULL DEFAULT now()
);
-- Aggregation per app and day; purge of rows older than 2 years.
CREATE INDEX ad_views_app_created_idx ON ad_views (app_id, created_at);
CREATE INDEX ad_views_created_at_idx ON ad_views (created_at);

-- Daily aggregates (no user-identifying data). Upsert key: (day, app_id, ad_type, provider, placement);
-- use '' (never NULL) for a dimension that does not apply, so the key stays unique.
CREATE TABLE ad_revenue_daily (
    day                      date NOT NULL,
    app_id                   uuid NOT NULL,
    ad_type                  text NOT NULL,
    provider                 text NOT NULL,
    placement                text NOT NULL,
    requests                 bigint NOT NULL DEFAULT 0,
    impressions              bigint NOT NULL DEFAULT 0,
    clicks                   bigint NOT NULL DEFAULT 0,
    completions              bigint NOT NULL DEFAULT 0,
    revenue_usd              numeric(14, 6) NOT NULL DEFAULT 0,
    avg_display_duration_ms  double precision,
    ecpm                     double precision,   -- revenue / impressions * 1000
    fill_rate                double precision,   -- impressions / requests
    ctr                      double precision,   -- clicks / impressions
    completion_rate          double precision,   -- completions / impressions
    estimated                boolean NOT NULL DEFAULT false,   -- some revenue was estimated from eCPM
    computed_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (day, app_id, ad_type, provider, placement)
);
CREATE INDEX ad_revenue_daily_app_day_idx ON ad_revenue_daily (app_id, day);

CREATE TABLE freemium_campaigns (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id             uuid NOT NULL,
    name               text NOT NULL,
    campaign_type      text NOT NULL,            -- 'watch_ads', 'streak_bonus', 'referral'
    reward_amount      integer NOT NULL CHECK (reward_amount > 0),
    conditions         jsonb NOT NULL DEFAULT '{}'::jsonb,
    max_uses_per_user  integer NOT NULL DEFAULT 1,
    starts_at          timestamptz NOT NULL,
    ends_at            timestamptz NOT NULL,
    active             boolean NOT NULL DEFAULT true
);

CREATE TABLE campaign_participations (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id        uuid NOT NULL REFERENCES freemium_campaigns (id) ON DELETE CASCADE,
    user_id            uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    progress           integer NOT NULL DEFAULT 0,
    completed          boolean NOT NULL DEFAULT false,
    completed_at       timestamptz,
    reward_claimed     boolean NOT NULL DEFAULT false,
    reward_claimed_at  timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (campaign_id, user_id)
);

-- Rewards the Ads Service could not credit yet (Subscription Service unreachable).
CREATE TABLE pending_rewards (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id          uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    amount           integer NOT NULL CHECK (amount > 0),
    source           text NOT NULL CHECK (source IN ('ad', 'campaign')),
    reference        text NOT NULL,          -- ad_request_id or campaign_id
    campaign_id      uuid REFERENCES freemium_campaigns (id) ON DELETE SET NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'credited', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer,                -- 5 for campaign rewards, NULL = until success (ad rewards)
    last_error       text,
    next_attempt_at  timestamptz,
    idempotency_key  text NOT NULL UNIQUE DEFAULT gen_random_uuid()::text,   -- sent to /credits/earn
    credited_at      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, source, reference)
);
-- Periodic sweep: pending rewards due for another attempt.
CREATE INDEX pending_rewards_pending_idx ON pending_rewards (next_attempt_at) WHERE status = 'pending';

-- Push notifications to send (e.g. "credits added").
CREATE TABLE notifications (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    type        text NOT NULL,
    title       text NOT NULL,
    body        text NOT NULL,
    data        jsonb,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    dedup_key   text UNIQUE,        -- e.g. 'reward:<pending_reward_id>': recorded once
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz
);
CREATE INDEX notifications_pending_idx ON notifications (created_at) WHERE status = 'pending';
CREATE INDEX notifications_user_idx ON notifications (user_id, created_at);
