-- config/demo-seed.sql — demo data for `scripts/run` (applied by scripts/demo-env after `workerctl migrate`).
--
-- Idempotent: fixed UUIDs and ON CONFLICT DO NOTHING, so it can be applied on every start. Rows a job has changed
-- since (a geocoded location, a credited reward, an export that is ready, the deleted account) are left as the job
-- left them. Ad traffic uses ids derived from the calendar day (md5 → uuid), so a start on a later day adds that
-- day's yesterday/today traffic while a second start on the same day adds nothing.
--
-- Everything belongs to one demo application; the store products match the fake Apple and Google servers'
-- defaults (Tests/Fakes/fakes.py: Apple "com.example.premium.monthly", bundle "com.example"; Google
-- "premium_monthly"); the coordinates are the fake Nominatim's built-in places (Paris, London, Berlin).
-- E-mail addresses are on example.com (RFC 2606): the demo mails go to the fake SMTP server only.

BEGIN;
SET LOCAL TIME ZONE 'UTC';

-- The demo application (uuid): 0a000000-0000-4000-8000-00000000a001

-- ------------------------------------------------------------------------------------------ users + consent
INSERT INTO users (id, app_id, email, email_verified, first_name, last_name, display_name, auth_provider,
                   apple_id, google_id, status, last_login, created_at)
VALUES
  ('d0000000-0000-4000-8000-000000000001', '0a000000-0000-4000-8000-00000000a001', 'alice@example.com', true,
   'Alice', 'Martin', 'alice', 'apple', '001234.demo.alice', NULL, 'free', now() - interval '1 hour', now() - interval '120 days'),
  ('d0000000-0000-4000-8000-000000000002', '0a000000-0000-4000-8000-00000000a001', 'bob@example.com', true,
   'Bob', 'Smith', 'bob', 'google', NULL, '1098765432100000000001', 'free', now() - interval '2 hours', now() - interval '60 days'),
  ('d0000000-0000-4000-8000-000000000003', '0a000000-0000-4000-8000-00000000a001', 'chloe@example.com', true,
   'Chloé', 'Bernard', 'chloe', 'email', NULL, NULL, 'free', now() - interval '1 day', now() - interval '30 days'),
  ('d0000000-0000-4000-8000-000000000004', '0a000000-0000-4000-8000-00000000a001', 'david@example.com', true,
   'David', 'Jones', 'dj', 'google', NULL, '1098765432100000000004', 'free', now() - interval '3 days', now() - interval '10 days'),
  ('d0000000-0000-4000-8000-000000000005', '0a000000-0000-4000-8000-00000000a001', 'emma@example.com', false,
   'Emma', 'Schulz', 'emma', 'apple', '001234.demo.emma', NULL, 'free', now() - interval '5 hours', now() - interval '5 days')
ON CONFLICT DO NOTHING;

-- Dan asked for his account to be deleted 31 days ago; the 30-day delay is over (scripts/demo-env enqueues
-- AccountDeletionJob for the request once; afterwards his row is an anonymous shell and this insert is a no-op).
INSERT INTO users (id, app_id, email, email_verified, first_name, last_name, display_name, auth_provider, status,
                   delete_requested, delete_scheduled_at, delete_cancellation_token, created_at)
VALUES ('d0000000-0000-4000-8000-000000000009', '0a000000-0000-4000-8000-00000000a001', 'dan@example.com', true,
        'Dan', 'Leaver', 'dan', 'email', 'free', true, now() - interval '1 day',
        'c0000000-0000-4000-8000-000000000009', now() - interval '400 days')
ON CONFLICT DO NOTHING;

INSERT INTO deletion_requests (id, user_id, reason, token, requested_at, scheduled_at)
VALUES ('de000000-0000-4000-8000-000000000009', 'd0000000-0000-4000-8000-000000000009', 'no longer playing',
        'c0000000-0000-4000-8000-000000000009', now() - interval '31 days', now() - interval '1 day')
ON CONFLICT DO NOTHING;

INSERT INTO privacy_settings (user_id, consent_analytics, consent_geolocation, consent_personalized_ads,
                              consent_notifications)
SELECT u.id, true, true, u.id <> 'd0000000-0000-4000-8000-000000000003', true
FROM users u
WHERE u.id IN ('d0000000-0000-4000-8000-000000000001', 'd0000000-0000-4000-8000-000000000002',
               'd0000000-0000-4000-8000-000000000003', 'd0000000-0000-4000-8000-000000000004',
               'd0000000-0000-4000-8000-000000000005', 'd0000000-0000-4000-8000-000000000009')
  AND u.anonymized_at IS NULL
ON CONFLICT DO NOTHING;

-- Some history for the exports (and for Dan's deletion to remove).
INSERT INTO quiz_history (id, user_id, app_id, category_id, score, total_questions, played_at)
SELECT ('a1000000-0000-4000-8000-0000000000' || lpad(n::text, 2, '0'))::uuid, u.id, u.app_id,
       (ARRAY['geography', 'history', 'science', 'sports'])[1 + n % 4], 5 + n % 6, 10, now() - n * interval '1 day'
FROM generate_series(1, 24) AS n
JOIN users u ON u.id = ('d0000000-0000-4000-8000-00000000000' || (ARRAY['1','2','3','4','5','9'])[1 + n % 6])::uuid
WHERE u.anonymized_at IS NULL
ON CONFLICT DO NOTHING;

INSERT INTO user_achievements (user_id, achievement_id, unlocked_at)
SELECT u.id, a, now() - interval '3 days'
FROM users u, unnest(ARRAY['first_quiz', 'perfect_score']) AS a
WHERE u.id IN ('d0000000-0000-4000-8000-000000000001', 'd0000000-0000-4000-8000-000000000003',
               'd0000000-0000-4000-8000-000000000009')
  AND u.anonymized_at IS NULL
ON CONFLICT DO NOTHING;

-- ------------------------------------------------------------------------------------------ subscription plans
INSERT INTO subscription_plans (id, app_id, name, plan_type, apple_product_id, google_product_id, price, currency,
                                trial_enabled, trial_duration_days, features)
VALUES
  ('b0000000-0000-4000-8000-000000000001', '0a000000-0000-4000-8000-00000000a001', 'Premium monthly', 'monthly',
   'com.example.premium.monthly', 'premium_monthly', 4.99, 'EUR', false, 0, '{"ads": false, "offline_packs": true}'),
  ('b0000000-0000-4000-8000-000000000002', '0a000000-0000-4000-8000-00000000a001', 'Premium annual', 'annual',
   'com.example.premium.annual', 'premium_annual', 39.99, 'EUR', true, 7, '{"ads": false, "offline_packs": true}')
ON CONFLICT DO NOTHING;

-- ------------------------------------------------------------------------------------------ locations
-- Not geocoded yet: scripts/demo-env enqueues ReverseGeocodeJob for these (accuracy ≤ 1000 m, consent given).
INSERT INTO user_locations (id, user_id, latitude, longitude, accuracy, source, created_at)
SELECT v.id::uuid, v.user_id::uuid, v.lat, v.lon, v.acc, v.src, now() - interval '2 hours'
FROM (VALUES
  ('10000000-0000-4000-8000-000000000001', 'd0000000-0000-4000-8000-000000000001', 48.85837, 2.29448, 12.0, 'gps'),    -- Paris
  ('10000000-0000-4000-8000-000000000002', 'd0000000-0000-4000-8000-000000000002', 51.50100, -0.14190, 35.0, 'wifi'),  -- London
  ('10000000-0000-4000-8000-000000000003', 'd0000000-0000-4000-8000-000000000003', 52.51630, 13.37770, 20.0, 'gps'),   -- Berlin
  ('10000000-0000-4000-8000-000000000004', 'd0000000-0000-4000-8000-000000000004', 48.86060, 2.33760, 60.0, 'wifi'),   -- Paris
  ('10000000-0000-4000-8000-000000000005', 'd0000000-0000-4000-8000-000000000005', 51.50330, -0.11950, 25.0, 'gps'),   -- London
  ('10000000-0000-4000-8000-000000000009', 'd0000000-0000-4000-8000-000000000009', 52.52000, 13.40500, 15.0, 'gps')    -- Berlin
) AS v (id, user_id, lat, lon, acc, src)
JOIN users u ON u.id = v.user_id::uuid AND u.anonymized_at IS NULL
ON CONFLICT DO NOTHING;

-- ------------------------------------------------------------------------------------------ ad traffic
-- Yesterday and today (UTC): 30 requests per day over 3 ad types × 2 networks, 24 of them filled and viewed.
-- Ids: md5('demo-ad-request:<day>:<n>')::uuid, stable within a day.
INSERT INTO ad_requests (id, app_id, user_id, ad_type, placement, provider, ad_unit_id, filled, created_at)
SELECT md5('demo-ad-request:' || days.day || ':' || n)::uuid, '0a000000-0000-4000-8000-00000000a001',
       ('d0000000-0000-4000-8000-00000000000' || (1 + n % 5))::uuid,
       (ARRAY['rewarded', 'interstitial', 'banner'])[1 + n % 3],
       (ARRAY['level_end', 'main_menu'])[1 + n % 2],
       (ARRAY['admob', 'applovin'])[1 + (n / 3) % 2],
       'demo-unit-' || (n % 3), n % 5 <> 0,
       least(d + n * interval '20 minutes', now() - interval '1 minute')
FROM (VALUES ((now() AT TIME ZONE 'UTC')::date - 1), ((now() AT TIME ZONE 'UTC')::date)) AS days (day),
     LATERAL (SELECT (days.day::timestamp AT TIME ZONE 'UTC') AS d) AS t,
     generate_series(1, 30) AS n
ON CONFLICT DO NOTHING;

INSERT INTO ad_views (id, ad_request_id, app_id, user_id, ad_type, provider, placement, display_duration_ms,
                      ad_clicked, ad_completed, reward_granted, revenue_usd, created_at)
SELECT md5('demo-ad-view:' || r.id)::uuid, r.id, r.app_id, r.user_id, r.ad_type, r.provider, r.placement,
       CASE r.ad_type WHEN 'rewarded' THEN 30000 WHEN 'interstitial' THEN 8000 ELSE 45000 END,
       (get_byte(decode(md5(r.id::text), 'hex'), 0) % 10) = 0,
       r.ad_type <> 'banner', r.ad_type = 'rewarded',
       -- a few networks did not report revenue: the aggregation estimates those (estimated = true)
       CASE WHEN get_byte(decode(md5(r.id::text), 'hex'), 1) % 7 = 0 THEN NULL
            WHEN r.ad_type = 'rewarded' THEN 0.012 WHEN r.ad_type = 'interstitial' THEN 0.006 ELSE 0.0008 END,
       r.created_at + interval '2 seconds'
FROM ad_requests r
WHERE r.id IN (SELECT md5('demo-ad-request:' || day || ':' || n)::uuid
               FROM (VALUES ((now() AT TIME ZONE 'UTC')::date - 1), ((now() AT TIME ZONE 'UTC')::date)) AS days (day),
                    generate_series(1, 30) AS n)
  AND r.filled
ON CONFLICT DO NOTHING;

-- ------------------------------------------------------------------------------------------ rewards
INSERT INTO freemium_campaigns (id, app_id, name, campaign_type, reward_amount, conditions, max_uses_per_user,
                                starts_at, ends_at)
VALUES ('ca000000-0000-4000-8000-000000000001', '0a000000-0000-4000-8000-00000000a001', 'Watch 5 ads, get 50 credits',
        'watch_ads', 50, '{"ads_watched": 5}', 1, now() - interval '7 days', now() + interval '30 days')
ON CONFLICT DO NOTHING;

INSERT INTO campaign_participations (id, campaign_id, user_id, progress, completed, completed_at)
VALUES ('cb000000-0000-4000-8000-000000000001', 'ca000000-0000-4000-8000-000000000001',
        'd0000000-0000-4000-8000-000000000003', 5, true, now() - interval '1 hour')
ON CONFLICT DO NOTHING;

-- Rewards the Ads Service could not credit (Subscription Service was down): scripts/demo-env enqueues
-- PendingRewardJob for these.
INSERT INTO pending_rewards (id, user_id, amount, source, reference, campaign_id, max_attempts, last_error,
                             idempotency_key, created_at)
VALUES
  ('e0000000-0000-4000-8000-000000000001', 'd0000000-0000-4000-8000-000000000001', 10, 'ad',
   'ad000000-0000-4000-8000-000000000001', NULL, NULL, 'connection refused', 'demo-reward-1', now() - interval '20 minutes'),
  ('e0000000-0000-4000-8000-000000000002', 'd0000000-0000-4000-8000-000000000002', 10, 'ad',
   'ad000000-0000-4000-8000-000000000002', NULL, NULL, 'HTTP 503', 'demo-reward-2', now() - interval '15 minutes'),
  ('e0000000-0000-4000-8000-000000000003', 'd0000000-0000-4000-8000-000000000003', 50, 'campaign',
   'ca000000-0000-4000-8000-000000000001', 'ca000000-0000-4000-8000-000000000001', 5, NULL, 'demo-reward-3',
   now() - interval '1 hour')
ON CONFLICT DO NOTHING;

-- ------------------------------------------------------------------------------------------ privacy
-- Chloé asked for a copy of her data (scripts/demo-env enqueues PrivacyExportJob for it).
INSERT INTO privacy_exports (id, user_id, status, requested_at)
VALUES ('f0000000-0000-4000-8000-000000000003', 'd0000000-0000-4000-8000-000000000003', 'pending',
        now() - interval '5 minutes')
ON CONFLICT DO NOTHING;

INSERT INTO audit_logs (id, user_id, app_id, action, ip_address, user_agent, result, details, "timestamp")
SELECT v.id::uuid, v.user_id::uuid, '0a000000-0000-4000-8000-00000000a001', v.action, '203.0.113.7', 'QuizApp/3.2 iOS',
       'success', NULL, now() - interval '31 days'
FROM (VALUES ('a0000000-0000-4000-8000-000000000003', 'd0000000-0000-4000-8000-000000000003', 'privacy_export_requested'),
             ('a0000000-0000-4000-8000-000000000009', 'd0000000-0000-4000-8000-000000000009', 'account_deletion_requested'))
     AS v (id, user_id, action)
ON CONFLICT DO NOTHING;

COMMIT;
