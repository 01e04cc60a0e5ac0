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

/// The Redis keys of the limiters (docs/limiters.md):
/// - `limits` HASH: limit name → `LimitSpec.encoded`, written by every worker at start (declarations).
/// - `limit:<name>` or `limit:<name>:<key>`: one limiter instance. A ZSET for `concurrent` (member = lease
///   token, score = lease expiry in ms of Redis time); a HASH for `window` (`window` index, `count`) and
///   `bucket` (`tokens`, `at` ms). Every instance key carries a PEXPIRE, so idle limiters disappear.
public enum LimitKeys {
    public static let declared = "limits"

    /// The instance key for `name` and the key derived from a job's arguments (nil or empty: one global limiter).
    public static func instance(name: String, key: String?) -> String {
        guard let key, !key.isEmpty else { return "limit:\(name)" }
        return "limit:\(name):\(key)"
    }
}

/// The Lua scripts behind the limiters. Every script reads the clock with Redis `TIME`, so the
/// machines' clocks never matter and all processes share one time line.
public enum LimitScripts {
    /// Admits one holder through every limit of a job at once, or none of them.
    /// KEYS: the instance keys; ARGV[1] the lease token, then per key three values: kind, max, ms.
    /// Pass 1 checks every limit without changing anything (expired leases are removed); pass 2
    /// takes a lease / counts the admission / takes a token in each. So a job that one limit refuses
    /// consumes nothing from the others.
    /// Returns {1, 0, 0, now} when admitted; {0, wait ms, index of the refusing key (1-based), now} otherwise,
    /// where wait is when that limit could next admit (lease expiry, window end, next token).
    public static let admit = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local token = ARGV[1]
        local state = {}
        for i = 1, #KEYS do
          local kind, max, ms = ARGV[3 * i - 1], tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1])
          local key = KEYS[i]
          if kind == 'concurrent' then
            redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
            if redis.call('ZCARD', key) >= max then
              local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
              return {0, math.max(1, tonumber(first[2]) - now), i, now}
            end
          elseif kind == 'window' then
            local idx = math.floor(now / ms)
            local h = redis.call('HMGET', key, 'window', 'count')
            local count = 0
            if tonumber(h[1]) == idx then count = tonumber(h[2]) or 0 end
            if count >= max then return {0, math.max(1, (idx + 1) * ms - now), i, now} end
            state[i] = {idx, count}
          else
            local h = redis.call('HMGET', key, 'tokens', 'at')
            local tokens = tonumber(h[1]) or max
            local at = tonumber(h[2]) or now
            tokens = math.min(max, tokens + math.max(0, now - at) * max / ms)
            if tokens < 1 then return {0, math.max(1, math.ceil((1 - tokens) * ms / max)), i, now} end
            state[i] = tokens
          end
        end
        for i = 1, #KEYS do
          local kind, ms = ARGV[3 * i - 1], tonumber(ARGV[3 * i + 1])
          local key = KEYS[i]
          if kind == 'concurrent' then
            redis.call('ZADD', key, now + ms, token)
            redis.call('PEXPIRE', key, ms + 60000)
          elseif kind == 'window' then
            redis.call('HSET', key, 'window', state[i][1], 'count', state[i][2] + 1)
            redis.call('PEXPIRE', key, ms * 2)
          else
            redis.call('HSET', key, 'tokens', tostring(state[i] - 1), 'at', now)
            redis.call('PEXPIRE', key, ms * 2)
          end
        end
        return {1, 0, 0, now}
        """)

    /// Holds a `bucket` or `window` instance back: no admission before now + pause (a provider's 429 with
    /// Retry-After). KEYS[1] the instance key; ARGV: kind, max, ms, pause ms. A bucket gets
    /// `tokens = min(tokens, 1 − pause × max / ms)` (its next token comes after the pause, never sooner than it
    /// already would). A window only has the current window's count, so it is filled up to `max`: the pause ends
    /// with the current window, however long it was asked to be. Returns the ms until the instance admits again.
    public static let hold = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local kind, max, ms, pause = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
        local key = KEYS[1]
        if kind == 'bucket' then
          local h = redis.call('HMGET', key, 'tokens', 'at')
          local tokens = tonumber(h[1]) or max
          local at = tonumber(h[2]) or now
          tokens = math.min(max, tokens + math.max(0, now - at) * max / ms)
          tokens = math.min(tokens, 1 - pause * max / ms)
          redis.call('HSET', key, 'tokens', tostring(tokens), 'at', now)
          redis.call('PEXPIRE', key, ms * 2 + pause)
          return math.ceil((1 - tokens) * ms / max)
        end
        local idx = math.floor(now / ms)
        redis.call('HSET', key, 'window', idx, 'count', max)
        redis.call('PEXPIRE', key, ms * 2)
        return (idx + 1) * ms - now
        """)

    /// Renews leases. KEYS: concurrent instance keys; ARGV per key: token, lease ms. A lease that is no
    /// longer there (it expired and was reclaimed) is not re-added. Returns how many were renewed.
    public static let renew = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local renewed = 0
        for i = 1, #KEYS do
          local token, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
          if redis.call('ZSCORE', KEYS[i], token) then
            redis.call('ZADD', KEYS[i], now + ms, token)
            redis.call('PEXPIRE', KEYS[i], ms + 60000)
            renewed = renewed + 1
          end
        end
        return renewed
        """)
}

/// A lease on one concurrent limiter instance, held while a job runs.
public struct LimitLease: Sendable, Hashable {
    public let key: String
    public let token: String
    public let milliseconds: Int
}

/// What the admit script decided.
public enum LimitAdmission: Sendable, Equatable {
    /// Admitted at `atMilliseconds` (Redis time); the concurrent leases to renew while running and release at the end.
    case admitted(leases: [LimitLease], atMilliseconds: Int64)
    /// `spec` refused; it could admit again in about `waitMilliseconds`.
    case overLimit(spec: LimitSpec, waitMilliseconds: Int)
}

/// Talks to the limiter keys. Stateless; any thread with its own connection may call it.
public enum LimitStore {
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
