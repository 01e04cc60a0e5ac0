import Foundation

/// One fleet-wide limit as Redis sees it: its kind, name, size and period. Built by the runtime from a
/// job class's declarations; also what `workerctl limits ls` reads back from the `limits` hash.
public struct LimitSpec: Sendable, Equatable, Hashable {
    public enum Kind: String, Sendable {
        /// At most `max` holders at once; a holder's lease lasts `milliseconds` unless its process renews it.
        case concurrent
        /// At most `max` admissions per fixed window of `milliseconds`, windows aligned on Redis time
        /// (window index = floor(now_ms / milliseconds)).
        case window
        /// Token bucket: `max` tokens, refilled continuously at `max` per `milliseconds`; one token per admission.
        case bucket
    }

    public let kind: Kind
    /// Letters, digits, `-` and `_` only (Sidekiq Enterprise's rule): `:` separates it from the derived key.
    public let name: String
    public let max: Int
    public let milliseconds: Int

    public init(kind: Kind, name: String, max: Int, milliseconds: Int) {
        self.kind = kind
        self.name = name
        self.max = max
        self.milliseconds = milliseconds
    }

    /// True when `name` is a valid limit name.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_"
        }
    }

    /// The form stored in the `limits` hash (`kind max milliseconds`).
    public var encoded: String { "\(kind.rawValue) \(max) \(milliseconds)" }

    public init?(name: String, encoded: String) {
        let parts = encoded.split(separator: " ")
        guard parts.count == 3, let kind = Kind(rawValue: String(parts[0])), let max = Int(parts[1]),
              let milliseconds = Int(parts[2]) else { return nil }
        self.init(kind: kind, name: name, max: max, milliseconds: milliseconds)
    }
}

/// A lease on one concurrent limiter instance, held while a job runs.
package struct LimitLease: Sendable, Hashable {
    public let key: String
    public let token: String
    public let milliseconds: Int
}

/// What the admit script decided.
package enum LimitAdmission: Sendable, Equatable {
    /// Admitted at `atMilliseconds` (Redis time); the concurrent leases to renew while running and release at the end.
    case admitted(leases: [LimitLease], atMilliseconds: Int64)
    /// `spec` refused; it could admit again in about `waitMilliseconds`.
    case overLimit(spec: LimitSpec, waitMilliseconds: Int)
}

/// Talks to the limiter keys. Stateless; any thread with its own connection may call it.
package enum LimitStore {
    /// One limit applied to one instance key.
    public typealias Instance = (spec: LimitSpec, key: String)

    /// Admits through every `instances` limit at once, or none (see `LimitScripts.admit`).
    public static func admit(_ connection: RedisConnection, _ instances: [Instance]) throws(RedisError) -> LimitAdmission {
        let token = UUID().uuidString.lowercased()
        var arguments: [any RedisArgument] = [token]
        for instance in instances {
            arguments += [instance.spec.kind.rawValue, instance.spec.max, instance.spec.milliseconds]
        }
        let reply = try connection.evaluate(LimitScripts.admit, keys: instances.map(\.key), arguments: arguments)
        guard let parts = reply.array, parts.count == 4, let admitted = parts[0].integer, let wait = parts[1].integer,
              let index = parts[2].integer, let now = parts[3].integer else {
            throw .unexpectedReply("unexpected limiter reply \(reply)")
        }
        if admitted == 1 {
            return .admitted(leases: instances.filter { $0.spec.kind == .concurrent }.map {
                LimitLease(key: $0.key, token: token, milliseconds: $0.spec.milliseconds)
            }, atMilliseconds: now)
        }
        guard index >= 1, Int(index) <= instances.count else {
            throw .unexpectedReply("limiter refused through unknown key index \(index)")
        }
        return .overLimit(spec: instances[Int(index) - 1].spec, waitMilliseconds: Int(wait))
    }

    /// Renews `leases`; returns how many were still held (the others expired and were reclaimed).
    public static func renew(_ connection: RedisConnection, _ leases: [LimitLease]) throws(RedisError) -> Int {
        if leases.isEmpty { return 0 }
        var arguments: [any RedisArgument] = []
        for lease in leases { arguments += [lease.token, lease.milliseconds] }
        let reply = try connection.evaluate(LimitScripts.renew, keys: leases.map(\.key), arguments: arguments)
        return Int(reply.integer ?? 0)
    }

    /// Frees `leases` (the job ended).
    public static func release(_ connection: RedisConnection, _ leases: [LimitLease]) throws(RedisError) {
        if leases.isEmpty { return }
        _ = try connection.pipeline(leases.map { ["ZREM", $0.key, $0.token] })
    }

    /// Holds a `bucket` or `window` instance back for `milliseconds` (see `LimitScripts.hold`); returns the ms
    /// until it admits again. Precondition: not a `concurrent` limit (it counts holders, not time).
    @discardableResult
    public static func hold(_ connection: RedisConnection, _ instance: Instance, milliseconds: Int) throws(RedisError) -> Int {
        precondition(instance.spec.kind != .concurrent, "a concurrent limit cannot be held back")
        let reply = try connection.evaluate(LimitScripts.hold, keys: [instance.key],
                                            arguments: [instance.spec.kind.rawValue, instance.spec.max,
                                                        instance.spec.milliseconds, max(1, milliseconds)])
        return Int(reply.integer ?? 0)
    }

    /// Publishes declarations in the `limits` hash (for `workerctl limits ls`).
    public static func declare(_ connection: RedisConnection, _ specs: [LimitSpec]) throws(RedisError) {
        if specs.isEmpty { return }
        var arguments: [any RedisArgument] = ["HSET", LimitKeys.declared]
        for spec in specs { arguments += [spec.name, spec.encoded] }
        _ = try connection.send(arguments).checked()
    }
}
