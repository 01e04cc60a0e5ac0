-- 0014_job_outbox: transactional enqueue (docs/outbox.md).
-- A service enqueues a job by inserting a row in its own transaction (workers_enqueue, or the Swift
-- `Outbox.enqueue`); the relay moves committed rows to Redis in Sidekiq's format with the jid chosen here.
-- A rolled-back transaction leaves no row, so its job never runs. Pushed rows are kept for the retention
-- window so that the lost-job finder can push again a job Redis lost.

CREATE TABLE job_outbox (
    id              bigserial PRIMARY KEY,            -- relay order (FIFO within a queue)
    jid             text NOT NULL UNIQUE,             -- chosen at enqueue: 24 lowercase hex characters
    class           text NOT NULL,
    args            jsonb NOT NULL,                   -- a JSON array
    queue           text NOT NULL,
    retry           jsonb NOT NULL,                   -- true, false or a non-negative integer
    extra           jsonb NOT NULL DEFAULT '{}',      -- more top-level payload fields (tags, backtrace, ...)
    run_at          timestamptz,                      -- NULL: now; later: pushed into `schedule`
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),  -- the payload's created_at
    pushed_at       timestamptz,                      -- NULL until the relay's push to Redis committed
    error           text,                             -- a row the relay could not turn into a payload
    recovered_count integer NOT NULL DEFAULT 0,       -- times the lost-job finder pushed it again
    recovered_at    timestamptz
);

-- The relay's queue: unpushed rows in id order.
CREATE INDEX job_outbox_unpushed_idx ON job_outbox (id) WHERE pushed_at IS NULL;
-- Retention sweep and the lost-job finder's window.
CREATE INDEX job_outbox_pushed_at_idx ON job_outbox (pushed_at) WHERE pushed_at IS NOT NULL;

-- Enqueue from any language, inside the caller's transaction:
--   SELECT workers_enqueue('ValidateReceiptJob', '[{"user_id": 7}]');
--   SELECT workers_enqueue('Report', '[]', queue => 'low', at => now() + interval '1 hour');
-- Returns the jid. Invalid input raises SQLSTATE 22023 and, like any error, aborts the caller's transaction.
-- The NOTIFY is delivered at COMMIT only (and never for a rollback); it wakes the relays at once.
CREATE FUNCTION workers_enqueue(class text, args jsonb DEFAULT '[]', queue text DEFAULT 'default',
                                at timestamptz DEFAULT NULL, retry jsonb DEFAULT 'true',
                                extra jsonb DEFAULT '{}', jid text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    chosen text := coalesce(jid, substr(md5(gen_random_uuid()::text), 1, 24));
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
    INSERT INTO job_outbox (jid, class, args, queue, retry, extra, run_at)
    VALUES (chosen, class, args, queue, retry, extra - 'class' - 'args' - 'jid' - 'queue' - 'retry' - 'at'
                                                      - 'created_at' - 'enqueued_at', at);
    PERFORM pg_notify('workers_outbox', '');
    RETURN chosen;
END
$$;
