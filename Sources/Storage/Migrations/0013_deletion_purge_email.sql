-- Erasure reaches jobs that name the user only by e-mail address (docs/jobs-privacy.md).
-- The anonymisation transaction removes users.email, but the Redis purge runs after the commit (and again on
-- a retry): the address it must search for is kept here, in the same transaction, and set to NULL by the
-- deletion job as soon as the purge has succeeded. It is the only copy of the address after the commit and
-- must not outlive the purge.
ALTER TABLE deletion_requests ADD COLUMN purge_email text;
