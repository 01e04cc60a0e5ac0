import CoreMetrics
import Foundation
import Queue

/// A fleet-wide rate limit for one external provider, kept in Redis so that it holds across every
/// worker process and thread.
///
/// ## How it works
/// One Redis key per provider holds the next free send time (milliseconds, Redis server clock).
/// `reserve` runs one Lua script that takes the slot `max(now, next)` and moves `next` one
/// interval further, atomically: slots are handed out first come, first served, and two callers
/// never get slots closer than `interval`. The caller then sleeps until its own slot (relative
/// wait, so the clocks of the workers do not matter) and sends. A slot whose wait would exceed
/// `maxWait` is not taken: the caller learns how long the backlog is and retries later.
///
/// A 429 pushes `next` to at least `now + Retry-After` (`pause`), so the whole fleet backs off.
///
/// ## Threads
/// Stateless apart from its configuration; any number of threads may call it at once (each call
/// borrows a pooled Redis connection for one script run, never while sleeping).
public struct ProviderRateLimiter: Sendable {
    public let redis: RedisPool
    public let key: String
    /// Milliseconds between two slots.
    public let intervalMilliseconds: Int
    public let maxWait: Double

    public init(redis: RedisPool, provider: String, minimumInterval: Double, maxWait: Double) {
        self.redis = redis
        self.key = "ratelimit:\(provider):next"
        self.intervalMilliseconds = max(1, Int((minimumInterval * 1000).rounded(.up)))
        self.maxWait = maxWait
    }

    /// KEYS[1] next-free key; ARGV[1] interval ms; ARGV[2] longest acceptable wait ms.
    /// Returns {granted (1/0), wait ms}.
    static let reserveScript = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local interval = tonumber(ARGV[1])
        local nextFree = tonumber(redis.call('GET', KEYS[1]) or '0')
        local slot = math.max(now, nextFree)
        local wait = slot - now
        if wait > tonumber(ARGV[2]) then return {0, wait} end
        redis.call('SET', KEYS[1], slot + interval, 'PX', wait + interval + 60000)
        return {1, wait}
        """)

    /// KEYS[1] next-free key; ARGV[1] pause ms. Moves the next free slot to at least now + pause.
    static let pauseScript = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local target = now + tonumber(ARGV[1])
        local nextFree = tonumber(redis.call('GET', KEYS[1]) or '0')
        if target > nextFree then
            redis.call('SET', KEYS[1], target, 'PX', tonumber(ARGV[1]) + 60000)
        end
        return target
        """)

    /// Why no slot was obtained.
    public enum WaitError: Error, Sendable, CustomStringConvertible {
        /// The queue of reserved slots is longer than `maxWait`; try again after `seconds`.
        case backlog(seconds: Double)
        /// The job was cancelled (timeout or shutdown) while it waited for its slot.
        case cancelled

        public var description: String {
            switch self {
            case .backlog(let seconds): return "provider rate-limit backlog of \(Int(seconds.rounded(.up))) s exceeds the wait limit"
            case .cancelled: return "cancelled while waiting for a rate-limit slot"
            }
        }
    }

    /// Reserves the next slot and sleeps until it comes; returns when the caller may send one request.
    /// Throws `WaitError` (backlog, cancelled) or a `RedisError`.
    public func acquire(isCancelled: () -> Bool) throws -> Void {
        let reply = try redis.withConnection { connection in
            try connection.evaluate(Self.reserveScript, keys: [key],
                                    arguments: [intervalMilliseconds, Int(maxWait * 1000)])
        }
        guard let parts = reply.array, parts.count == 2, let granted = parts[0].integer, let waitMs = parts[1].integer else {
            throw RedisError.unexpectedReply("unexpected rate-limit reply \(reply)")
        }
        guard granted == 1 else { throw WaitError.backlog(seconds: Double(waitMs) / 1000) }
        CoreMetrics.Timer(label: "workers_rate_limiter_wait_seconds", dimensions: [("limiter", key)],
                          preferredDisplayUnit: .seconds).recordMilliseconds(waitMs)
        let until = Date().addingTimeInterval(Double(waitMs) / 1000)
        while true {
            if isCancelled() { throw WaitError.cancelled }
            let remaining = until.timeIntervalSinceNow
            if remaining <= 0 { return }
            Thread.sleep(forTimeInterval: min(remaining, 0.2))
        }
    }

    /// Makes the whole fleet wait at least `seconds` before the next request (after a 429).
    public func pause(seconds: Double) throws {
        let milliseconds = max(1, Int((seconds * 1000).rounded(.up)))
        _ = try redis.withConnection { connection in
            try connection.evaluate(Self.pauseScript, keys: [key], arguments: [milliseconds])
        }
    }
}
