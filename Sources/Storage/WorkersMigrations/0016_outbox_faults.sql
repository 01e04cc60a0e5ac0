-- 0016_outbox_faults: the outbox under faults (docs/outbox.md, issue 32).
-- * A maximum payload size, checked by workers_enqueue (and by the relay, docs/outbox.md "Size limit").
-- * workers_enqueue strips the fields the runtime owns from `extra`, and clamps `unique_for` and `at`.
-- * Partial indexes for the operators' views (/outbox, `workerctl outbox status`): refused and pushed-again rows.
-- * job_outbox_relays: one row per running relay, its heartbeat (is any relay alive?).
-- Never edit this file once applied: add 0017.

-- The largest job a producer may enqueue through the outbox, in bytes: `args` as JSON text, and the whole row
-- (class, queue, args, retry, extra). Default 1 MiB (1048576); per database, role or session:
--   ALTER DATABASE workers SET workers.max_payload_bytes = '4194304';
-- A value that is not a positive integer falls back to the default.
CREATE FUNCTION workers_max_payload_bytes() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s ~ '^[0-9]{1,15}$' AND s::bigint > 0 THEN s::bigint ELSE 1048576 END
    FROM (SELECT coalesce(current_setting('workers.max_payload_bytes', true), '') AS s) t
$$;

-- Same signature as 0014 (CREATE OR REPLACE keeps every GRANT given on it). What changed:
-- * `extra` loses the fields only the runtime writes (a producer setting them could crash or mislead workers:
--   counters near Int64.max, a foreign batch id, a fake failure): retry_count, interrupted_count, unique_key, bid,
--   error_message, error_class, error_backtrace, failed_at, retried_at, raw_payload,
--   overrated, overrated_at (NewJob.runtimeOwnedFields). They are stripped
--   silently (not refused), like the payload fields the function sets itself (class, args, jid, ...).
-- * `extra.unique_for`, when a number, is clamped into 0 .. 31536000 (one year).
-- * `at`: before the epoch (or -infinity) means now; after 9999-12-31T23:59:59Z (or infinity) means then.
-- * args (as JSON text) and the whole row may not exceed workers_max_payload_bytes(): SQLSTATE 54000.
CREATE OR REPLACE FUNCTION workers_enqueue(class text, args jsonb DEFAULT '[]', queue text DEFAULT 'default',
                                           at timestamptz DEFAULT NULL, retry jsonb DEFAULT 'true',
                                           extra jsonb DEFAULT '{}', jid text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    chosen text := coalesce(jid, substr(md5(gen_random_uuid()::text), 1, 24));
    kept jsonb;
    limit_bytes bigint := workers_max_payload_bytes();
    args_bytes bigint;
    row_bytes bigint;
    run_at timestamptz := at;
BEGIN
    IF class IS NULL OR class = '' OR class ~ '\s' THEN
        RAISE EXCEPTION 'workers_enqueue: invalid job class %', coalesce(quote_literal(class), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF args IS NULL OR jsonb_typeof(args) <> 'array' THEN
        RAISE EXCEPTION 'workers_enqueue: args must be a JSON array' USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue = '' OR queue ~ '[\s*?\[\]]' THEN
        RAISE EXCEPTION 'workers_enqueue: invalid queue name %', coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF retry IS NULL OR NOT (jsonb_typeof(retry) = 'boolean' OR (jsonb_typeof(retry) = 'number' AND retry::text ~ '^[0-9]+$')) THEN
        RAISE EXCEPTION 'workers_enqueue: retry must be true, false or a non-negative integer' USING ERRCODE = '22023';
    END IF;
    IF extra IS NULL OR jsonb_typeof(extra) <> 'object' THEN
        RAISE EXCEPTION 'workers_enqueue: extra must be a JSON object' USING ERRCODE = '22023';
    END IF;
    IF chosen !~ '^[0-9a-f]{24}$' THEN
        RAISE EXCEPTION 'workers_enqueue: jid must be 24 lowercase hex characters' USING ERRCODE = '22023';
    END IF;
    -- Fields the payload gets from the parameters, then the runtime-owned ones.
    kept := extra - 'class' - 'args' - 'jid' - 'queue' - 'retry' - 'at' - 'created_at' - 'enqueued_at'
                  - 'retry_count' - 'interrupted_count' - 'unique_key' - 'bid' - 'error_message' - 'error_class'
                  - 'error_backtrace' - 'failed_at' - 'retried_at' - 'raw_payload' - 'overrated' - 'overrated_at';
    IF jsonb_typeof(kept -> 'unique_for') = 'number' THEN
        kept := jsonb_set(kept, '{unique_for}',
                          to_jsonb(least(greatest((kept ->> 'unique_for')::numeric, 0), 31536000)));
    END IF;
    IF run_at IS NOT NULL THEN
        IF run_at < 'epoch'::timestamptz THEN
            run_at := NULL;
        ELSIF run_at > '9999-12-31 23:59:59+00'::timestamptz THEN
            run_at := '9999-12-31 23:59:59+00'::timestamptz;
        END IF;
    END IF;
    -- Sizes as the relay will see them (JSON text); never echo the content (it may be personal data).
    args_bytes := octet_length(args::text);
    row_bytes := args_bytes + octet_length(kept::text) + octet_length(class) + octet_length(queue)
                 + octet_length(retry::text);
    IF args_bytes > limit_bytes OR row_bytes > limit_bytes THEN
        RAISE EXCEPTION 'workers_enqueue: job of % bytes (args % bytes) is over the limit of % bytes',
                        row_bytes, args_bytes, limit_bytes
              USING ERRCODE = '54000', HINT = 'workers.max_payload_bytes sets the limit (docs/outbox.md)';
    END IF;
    INSERT INTO job_outbox (jid, class, args, queue, retry, extra, run_at)
    VALUES (chosen, class, args, queue, retry, kept, run_at);
    PERFORM pg_notify('workers_outbox', '');
    RETURN chosen;
END
$$;

-- Operators' views read these without scanning the table (docs/outbox.md, "Looking at it").
CREATE INDEX job_outbox_errored_idx ON job_outbox (id) WHERE error IS NOT NULL;
CREATE INDEX job_outbox_recovered_idx ON job_outbox (recovered_at DESC NULLS LAST, id DESC) WHERE recovered_count > 0;

-- One row per running relay (`workerctl relay`, `--outbox-relay`): `seen_at` is refreshed every few seconds
-- while it runs; the row is deleted when it stops, and rows not seen for a day by the retention loop. A relay
-- is live while `seen_at` is recent (docs/outbox.md, "Is a relay running?").
CREATE TABLE job_outbox_relays (
    relay       text PRIMARY KEY,                  -- host:pid:random, chosen by the relay at start
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    seen_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
