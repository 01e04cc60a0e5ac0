-- 0012_pending_reward_keys: the idempotency key of a pending reward is derived from the reward's identity, so the
-- retry job and the Ads Service's own first call (UC-ADS-4.1 21c / UC-ADS-4.4 23c, which may have credited the user
-- before it timed out) carry the same Idempotency-Key and dedupe at the Subscription Service. A random key per row
-- (the old default) credited a second time. The contract is in docs/jobs-geo-ads.md ("Idempotency key").
--
--   source 'ad'        ad_reward:<reference>               (reference = ad_request_id)
--   source 'campaign'  campaign:<reference>:<user_id>      (reference = campaign_id)
--
-- Both follow the row's UNIQUE (user_id, source, reference): one key per reward. An ad_request_id is a uuid of one
-- ad request of one user, so it needs no user id; a campaign is claimed once per user, so its key carries both.

CREATE FUNCTION pending_reward_idempotency_key(source text, reference text, user_id uuid) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    AS $$
        SELECT CASE source
                   WHEN 'ad' THEN 'ad_reward:' || reference
                   WHEN 'campaign' THEN 'campaign:' || reference || ':' || user_id::text
               END
    $$;

-- A DEFAULT cannot read other columns: a row inserted without a key gets the derived one from this trigger. A key
-- given explicitly (the one the Ads Service really sent) is kept as given.
CREATE FUNCTION pending_rewards_set_idempotency_key() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    BEGIN
        IF NEW.idempotency_key IS NULL THEN
            NEW.idempotency_key := pending_reward_idempotency_key(NEW.source, NEW.reference, NEW.user_id);
        END IF;
        RETURN NEW;
    END
    $$;

ALTER TABLE pending_rewards ALTER COLUMN idempotency_key DROP DEFAULT;
CREATE TRIGGER pending_rewards_idempotency_key BEFORE INSERT ON pending_rewards
    FOR EACH ROW EXECUTE FUNCTION pending_rewards_set_idempotency_key();

-- Existing rows. Only rows no request of ours can have carried yet get the derived key: still pending, never
-- attempted (attempts = 0), and holding the old random default (a bare uuid; a key set explicitly is kept).
-- Every other row keeps its key, on purpose:
--   * credited: the Subscription Service applied that key; it is the link to its transaction, and a new key could
--     only ever credit again if the row were re-run;
--   * failed, or pending with attempts > 0: one of our earlier attempts sent the old key and may have been applied
--     with its answer lost (a timeout). Re-sending that key is what makes the retry dedupe; a new key would credit a
--     second time. (The Ads Service's first call for such a row predates this contract and did not use the derived
--     key either, so nothing is lost by keeping it.)
UPDATE pending_rewards
   SET idempotency_key = pending_reward_idempotency_key(source, reference, user_id), updated_at = now()
 WHERE status = 'pending' AND attempts = 0
   AND idempotency_key ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
