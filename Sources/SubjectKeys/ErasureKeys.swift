import WorkersQueue

/// The Redis keys of SubjectKeys (docs/jobs-privacy.md), on every shard. Immutable; any thread.
package enum ErasureKeys {
    /// STRING counter `subject-keys:erased`: the fleet-wide "a subject key was erased" epoch (`SubjectKeyInvalidation`).
    package static let erased = "subject-keys:erased"
    /// ZSET `subject-keys:erasures`: person digest → time of the erasure (`SubjectKeyErasureJournal`).
    package static let erasures = "subject-keys:erasures"

    /// The key patterns above, for the key catalogue (the union: Tests/JobsTests/KeyCatalogue+All.swift).
    package static let catalogue: [KeyPattern] = [
        KeyPattern("subject-keys-erased", .string, owner: "subject keys", key: erased),
        KeyPattern("subject-keys-erasures", .zset, owner: "subject keys", key: erasures),
    ]
}
