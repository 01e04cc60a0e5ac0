import Foundation
import Workers

/// The one way a job's arguments read and write a UUID field (`user_id`, `request_id`, `location_id`…): text on the
/// wire, lowercase as Ruby's `SecureRandom.uuid` and PostgreSQL write it, checked when decoded.
///
/// A value that is not a UUID is bad input (dead at once) with a reason that names the field only: the value is
/// never repeated, since a producer's mistake there may be personal data (an e-mail address sent as `user_id`).
/// Pure functions; any thread.
enum ArgumentUUID {
    static func parse(_ text: String, field: String) throws(JobError) -> UUID {
        guard let id = UUID(uuidString: text) else { throw .badInput("\(field) must be a UUID") }
        return id
    }
}

extension KeyedEncodingContainer {
    /// `id` as its lowercase text (the wire form `ArgumentUUID.parse` reads).
    mutating func encodeUUID(_ id: UUID, forKey key: Key) throws {
        try encode(id.uuidString.lowercased(), forKey: key)
    }
}
