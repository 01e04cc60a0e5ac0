-- Persons whose data keys were erased (issue 50 point 4, docs/jobs-privacy.md "Erasure"): no data key is made for
-- them again. Without it, a job enqueued for a person after their erasure got a fresh key linked to them that no
-- later erasure deletes. Holds the users.id only, which the anonymised account row keeps anyway.
-- SubjectKeyStore.erase(personID:) writes it in the erasure's transaction; SubjectKeyStore.dataKey(forSubject:person:)
-- reads it under the same per-person advisory lock, so a key cannot be made between the check and the erasure.
CREATE TABLE subject_key_erasures (
    person_id uuid PRIMARY KEY,
    erased_at timestamptz NOT NULL DEFAULT now()
);
