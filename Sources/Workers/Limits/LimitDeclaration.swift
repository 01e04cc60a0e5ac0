import Foundation
import WorkersQueue

/// A fleet-wide limit a job class declares (docs/limiters.md), on a key derived from the job's arguments.
///
/// The runtime admits a job through all of its class's limits at once before `perform` runs (one Lua
/// script, Redis time); a job over any of them is rescheduled (`OverLimitPolicy`) without counting as a
/// failure or a retry. A `concurrent` slot is a lease the running process renews; it is freed when the
/// job returns, or by expiry once its process stops renewing it (killed, frozen).
public struct LimitDeclaration: Sendable {
    public let spec: LimitSpec
    /// The instance key from the payload's `args` (nil or "": one limiter for the whole class). It becomes
    /// part of a Redis key, so derive it from ids, never from personal data (e-mails, coordinates, tokens).
    public let key: @Sendable ([JSONValue]) -> String?

    /// At most `max` jobs hold this limit at once, fleet-wide. `lease` is how long a slot survives a process
    /// that stopped renewing it; the running process renews every `lease / 3`.
    public static func concurrent(_ name: String, max: Int, lease: Duration = .seconds(30),
                                  key: @escaping @Sendable ([JSONValue]) -> String? = { _ in nil }) -> LimitDeclaration {
        LimitDeclaration(spec: LimitSpec(kind: .concurrent, name: name, max: max, milliseconds: milliseconds(lease)), key: key)
    }

    /// At most `max` admissions per window of length `period`; windows are aligned on Redis time.
    public static func window(_ name: String, max: Int, per period: Duration,
                              key: @escaping @Sendable ([JSONValue]) -> String? = { _ in nil }) -> LimitDeclaration {
        LimitDeclaration(spec: LimitSpec(kind: .window, name: name, max: max, milliseconds: milliseconds(period)), key: key)
    }

    /// A token bucket of `capacity` tokens refilled continuously at `capacity` per `period`; each admission
    /// takes one token. `capacity: 1` spaces admissions at least `period` apart.
    public static func bucket(_ name: String, capacity: Int, per period: Duration,
                              key: @escaping @Sendable ([JSONValue]) -> String? = { _ in nil }) -> LimitDeclaration {
        LimitDeclaration(spec: LimitSpec(kind: .bucket, name: name, max: capacity, milliseconds: milliseconds(period)), key: key)
    }

    /// A declaration's period in milliseconds: at least 1, at most a year (a period read from configuration).
    private static func milliseconds(_ period: Duration) -> Int {
        Swift.max(1, Bounded.milliseconds(period.inSeconds, maxSeconds: Bounded.maxIntervalSeconds))
    }

    /// The Redis instance key for a payload's arguments.
    public func instanceKey(args: [JSONValue]) -> String {
        LimitKeys.instance(name: spec.name, key: key(args).map(Self.sanitized))
    }

    /// Keeps a derived key to one Redis key segment: characters other than letters, digits, `-`, `_`, `.`
    /// become `_`, at most 100 characters.
    static func sanitized(_ key: String) -> String {
        String(String.UnicodeScalarView(key.unicodeScalars.prefix(100).map { scalar in
            let ok = ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
                || scalar == "-" || scalar == "_" || scalar == "."
            return ok ? scalar : "_"
        }))
    }
}

/// What happens to a job a limit refuses: Sidekiq Enterprise's OverLimit handling. The job goes to the
/// `schedule` set with the payload field `overrated` (times rescheduled so far) plus one, and no
/// `retry_count`, `error_*`, `failed_at` change: not a failure, not a retry, not counted in `stat:*`.
/// Once `overrated` has reached `reschedule`, the next refusal is raised as an `OverLimit` error and takes
/// the normal retry path (counts as a failure, `retry_count` grows), as Sidekiq Enterprise does.
public struct OverLimitPolicy: Sendable {
    /// Times a job may be rescheduled for being over its limit (Sidekiq Enterprise's `reschedule`; 25 by default,
    /// per https://juanitofatas.com/series/sidekiq/ent-rate-limiting, a summary of the Ent-Rate-Limiting wiki).
    public var reschedule: Int
    /// The delay until the next try, from `overrated` (0 for the first refusal) and the limiter's own
    /// estimate of when it admits again. The runner clamps it into `0...Bounded.maxIntervalSeconds`.
    /// Called on the pool thread that ran the job; must not block.
    public var backoff: @Sendable (_ overrated: Int, _ limiterWait: Duration) -> Duration

    public init(reschedule: Int = 25,
                backoff: @escaping @Sendable (_ overrated: Int, _ limiterWait: Duration) -> Duration = OverLimitPolicy.sidekiqEnterprise) {
        self.reschedule = reschedule
        self.backoff = backoff
    }

    /// Sidekiq Enterprise's default: `300 × overrated + rand(300) + 1` seconds (linear, 5 minutes a step).
    public static let sidekiqEnterprise: @Sendable (Int, Duration) -> Duration = { overrated, _ in
        .seconds(300 * overrated + Int.random(in: 0..<300) + 1)
    }

    /// Tries again when the limiter says it frees up, plus up to `jitter`, capped at `cap`: for short limits
    /// (1 request/s) where five minutes would be far too long.
    public static func limiterWait(jitter: Duration = .seconds(1),
                                   cap: Duration = .seconds(300)) -> @Sendable (Int, Duration) -> Duration {
        let jitterSeconds = Bounded.seconds(jitter.inSeconds, max: Bounded.maxIntervalSeconds)
        let longest = Duration.seconds(Bounded.maxIntervalSeconds)  // `wait + jitter` never overflows
        return { _, wait in min(cap, min(wait, longest) + .seconds(Double.random(in: 0...jitterSeconds))) }
    }
}

/// A job class's limits and what to do when they refuse (`JobOptions.limits`).
public struct JobLimits: Sendable, ExpressibleByArrayLiteral {
    public var declarations: [LimitDeclaration]
    public var overLimit: OverLimitPolicy

    public init(_ declarations: [LimitDeclaration] = [], overLimit: OverLimitPolicy = OverLimitPolicy()) {
        self.declarations = declarations
        self.overLimit = overLimit
    }

    public init(arrayLiteral elements: LimitDeclaration...) { self.init(elements) }

    public var isEmpty: Bool { declarations.isEmpty }
}

/// A job over its limit past `OverLimitPolicy.reschedule` reschedules: a normal, retried failure.
public struct OverLimit: Error, CustomStringConvertible {
    public let limit: String
    public let overrated: Int
    public var description: String { "over limit '\(limit)' after \(overrated) reschedules" }
}
