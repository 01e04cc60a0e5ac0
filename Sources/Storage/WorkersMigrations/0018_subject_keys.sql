-- Per-subject data keys for personal job arguments (issue 37, docs/jobs-privacy.md "Encrypted arguments").
-- Nothing here is readable without the key-encryption key (KEK) of the configuration: data keys and the lookup
-- key are stored wrapped (AES-256-GCM) under it. Erasing a person deletes their rows: every copy of their jobs
-- (Redis, its AOF, backups, dead) becomes unreadable.

-- One row per KEK that wraps keys: the HMAC lookup key wrapped under it. Opening it is the start-up check of the
-- configured KEK (a wrong KEK fails the AES-GCM tag). A rotation adds the new KEK's row and deletes the old one.
CREATE TABLE subject_key_encryption_keys (
    kek_id             text PRIMARY KEY,
    wrapped_lookup_key bytea NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE subject_keys (
    key_id         text PRIMARY KEY,               -- random (128 bits), the `kid` of the envelopes: names no one
    subject_digest bytea NOT NULL UNIQUE,          -- HMAC-SHA256(lookup key, 'subject|' || lower(subject)): no e-mail in clear
    person_id      uuid,                           -- users.id the subject belongs to, when known: erased together
    kek_id         text NOT NULL REFERENCES subject_key_encryption_keys (kek_id),
    wrapped_key    bytea NOT NULL,                 -- AES-GCM(KEK, data key, aad 'subject-key|' || key_id)
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subject_keys_person ON subject_keys (person_id) WHERE person_id IS NOT NULL;
CREATE INDEX subject_keys_kek ON subject_keys (kek_id);
