-- The person link of a data key becomes a keyed digest (issue 50 point 3, docs/jobs-privacy.md "Threat model"):
-- person_digest = HMAC-SHA256(lookup key, 'person|' || lower(users.id)), the lookup key being wrapped under the KEK
-- (subject_key_encryption_keys). A PostgreSQL dump then no longer says whose key a key id is: with a copy of Redis
-- (whose envelopes name key ids) it named the person of every sealed job without the KEK.
-- SQL cannot compute the digest (it needs the KEK): rows written before this migration keep person_id until a
-- process with the KEK opens the key store, which moves them to person_digest in batches (SubjectKeyStore.init);
-- erasures meanwhile match either column. New rows never fill person_id.
ALTER TABLE subject_keys ADD COLUMN person_digest bytea;
CREATE INDEX subject_keys_person_digest ON subject_keys (person_digest) WHERE person_digest IS NOT NULL;

-- The time a data key was made is close to the time its person's first sealed job was enqueued, and so to the
-- `created_at` of the rows that job wrote (a subscription naming the user): with a copy of Redis (key ids), a dump
-- linked a key to its person by that time alone. Nothing reads it: gone (docs/jobs-privacy.md, "Threat model").
ALTER TABLE subject_keys DROP COLUMN created_at;
