import WorkersBoundary
import Foundation

/// When a unique job's lock is released (Sidekiq Enterprise's `unique_until`).
public enum UniqueUntil: String, Sendable, Equatable, CaseIterable {
    /// Released when a worker takes the job to run it (fetch): "at most one *waiting* copy".
    case start
    /// Released when the job succeeds or dies; kept across retries (the default).
    case success
}

/// "At most one job with this key for `duration`": Sidekiq Enterprise's `unique_for` /
/// `unique_until` (https://github.com/sidekiq/sidekiq/wiki/Ent-Unique-Jobs).
///
/// The key is class + queue + args unless `key` derives one from the job's `args` (e.g. only the
/// user id). `duration` is the lock's TTL, only a safety net: the lock is released when the job
/// succeeds or dies (or starts, with `until: .start`), see docs/unique-jobs.md. An enqueue refuses a
/// `duration` outside `(0, maxDuration]`.
public struct UniquePolicy: Sendable {
    /// The lock's TTL (`unique_for` on the wire, in seconds).
    public var duration: Duration
    public var until: UniqueUntil
    /// Derives the uniqueness key from the job's `args`; nil = the whole `args` array.
    public var key: (@Sendable ([JSONValue]) -> String)?

    public init(for duration: Duration, until: UniqueUntil = .success, key: (@Sendable ([JSONValue]) -> String)? = nil) {
        self.duration = duration
        self.until = until
        self.key = key
    }

    /// `duration` in seconds (`unique_for`, the lock scripts' TTL arithmetic).
    package var seconds: Double { duration.inSeconds }

    /// The longest lock a policy may ask for: one year. A payload's `unique_for` above it is clamped to it
    /// (review M1: `1e300` trapped the fetcher, `1e15` made the settle script's `PEXPIREAT` fail after its `LREM`).
    public static let maxDuration: Duration = .seconds(Bounded.maxIntervalSeconds)
    /// `maxDuration` in seconds.
    package static let maxSeconds: Double = Bounded.maxIntervalSeconds
    /// The shortest lock a payload's `unique_for` gives: one millisecond, the unit of the lock's TTL. A positive
    /// `unique_for` below it (e.g. the subnormal `5e-324`, FuzzCorpus/payload/unique-for-smallest-subnormal.json)
    /// would otherwise become a zero `Duration`, and a zero TTL is refused by Redis.
    package static let minSeconds: Double = 0.001

    /// The policy a payload asks for itself (`unique_for` seconds > 0, clamped to `maxSeconds`, optional
    /// `unique_until`, as Sidekiq's Ruby client writes them from `sidekiq_options`), or nil.
    public static func requested(by payload: JobPayload) -> UniquePolicy? {
        guard let seconds = payload.fields["unique_for"]?.doubleValue, seconds > 0, seconds.isFinite else { return nil }
        let until = payload.fields["unique_until"]?.stringValue.flatMap(UniqueUntil.init(rawValue:)) ?? .success
        return UniquePolicy(for: Bounded.duration(seconds: Swift.max(seconds, minSeconds), max: maxSeconds), until: until)
    }

    /// The payload fields that carry this policy (so a worker that fetches the job knows it).
    public func fields(key: String?) -> JSONObject {
        var fields: JSONObject = ["unique_for": .double(seconds), "unique_until": .string(until.rawValue)]
        if let key { fields["unique_key"] = .string(key) }
        return fields
    }
}

/// A unique job's lock identity: `unique:<digest>`, digest = hex SHA-256 of the compact JSON array
/// `[class, queue, key]`, where key is the payload's `unique_key`, else the policy's derived key,
/// else the compact JSON of `args` (ours: keys in their order, `/` unescaped).
package struct UniqueLockKey: Sendable, Equatable, CustomStringConvertible {
    public let digest: String

    public init(digest: String) { self.digest = digest }

    public init(className: String, queue: String, key: String) {
        let material = JSONValue.array([.string(className), .string(queue), .string(key)]).serialized()
        digest = ContentHash.sha256Hex(material)
    }

    /// The lock for `payload` under `policy` (its own `unique_key` first).
    public init(payload: JobPayload, policy: UniquePolicy) {
        let key = payload.fields["unique_key"]?.stringValue
            ?? policy.key?(payload.args)
            ?? JSONValue.array(payload.args).serialized()
        self.init(className: payload.className, queue: payload.queue ?? "default", key: key)
    }

    /// `unique:<digest>` — a STRING whose value is the owning jid.
    public var redisKey: String { Keys.uniqueLock(digest) }
    public var description: String { redisKey }
}
