-- 0021_outbox_sealed_size: a row whose personal fields the relay will seal is checked at its sealed size when it
-- is accepted (issue 50 point 6, docs/outbox.md "Size limit"). Before, a row just under the limit in clear grew by
-- a third once sealed (base64) and the relay refused it later, marked `error`: the producer was never told.
-- Never edit this file once applied: add 0022.

-- The declared personal fields of each class a relay seals (`JobArguments.personalFields`): written by every relay
-- that seals when it starts (`SubjectArgumentsSealer.publishPersonalFields`), read by workers_enqueue. Holds field
-- names only.
CREATE TABLE workers_personal_fields (
    class      text PRIMARY KEY,
    fields     text[] NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- How many bytes `args` grows when the relay seals the declared personal fields of `class` in its first (hash)
-- argument: each clear value becomes {"enc":"v2","kid":<22>,"ct":<base64 of nonce (12) + value + tag (16)>}, at most
-- 60 bytes of envelope plus the base64; a value that is already an envelope (an object with "enc") or null stays.
-- An upper bound of the relay's own measure (the payload's compact JSON; jsonb's text has spaces).
-- SECURITY DEFINER: a producer role granted only workers_enqueue and INSERT on job_outbox (docs/outbox.md) needs no
-- grant on workers_personal_fields; it reads field names only, with a fixed search_path.
CREATE FUNCTION workers_sealed_growth(text, jsonb) RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = public, pg_temp AS $$
    SELECT coalesce(sum(60 + 4 * ceil((28 + octet_length(e.value::text))::numeric / 3) - octet_length(e.value::text)), 0)::bigint
    FROM workers_personal_fields p,
         jsonb_each(CASE WHEN jsonb_typeof($2 -> 0) = 'object' THEN $2 -> 0 ELSE '{}'::jsonb END) AS e
    WHERE p.class = $1 AND e.key = ANY (p.fields) AND e.value <> 'null'::jsonb
      AND NOT (jsonb_typeof(e.value) = 'object' AND e.value ? 'enc')
$$;

-- Same signature as 0016 (CREATE OR REPLACE keeps every GRANT given on it); only the size check changed.
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
    growth bigint;
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
    -- A class with declared personal fields grows when the relay seals them: checked at that size, here.
    growth := workers_sealed_growth(class, args);
    args_bytes := octet_length(args::text) + growth;
    row_bytes := args_bytes + octet_length(kept::text) + octet_length(class) + octet_length(queue)
                 + octet_length(retry::text);
    IF (args_bytes > limit_bytes OR row_bytes > limit_bytes) AND growth > 0 THEN
        RAISE EXCEPTION 'workers_enqueue: job of % bytes (args % bytes once its personal fields are sealed) is over the limit of % bytes',
                        row_bytes, args_bytes, limit_bytes
              USING ERRCODE = '54000', HINT = 'the relay encrypts the declared personal fields (base64 adds a third); workers.max_payload_bytes sets the limit (docs/outbox.md)';
    ELSIF args_bytes > limit_bytes OR row_bytes > limit_bytes THEN
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
