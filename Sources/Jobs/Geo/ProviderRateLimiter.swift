import CoreMetrics
import Foundation
import Queue

/// A fleet-wide rate limit and block switch for one external provider, kept in Redis so that it holds
/// across every worker process and thread.
///
/// ## Rate limit
/// One Redis key per provider (`ratelimit:<provider>:next`) holds the next free send time (milliseconds,
/// Redis server clock). `acquire` runs one Lua script that takes the slot `max(now, next)` and moves `next`
/// one interval further, atomically: slots are handed out first come, first served, and two callers never
/// get slots closer than `interval`. The caller then sleeps until its own slot (relative wait, so the clocks
/// of the workers do not matter) and sends. A slot whose wait would exceed `maxWait` is not taken: the
/// caller learns how long the backlog is and retries later.
///
/// A 429 pushes `next` to at least `now + Retry-After` (`pause`), so the whole fleet backs off.
///
/// ## Block (the provider refuses us: Nominatim's 403)
/// `block` writes `ratelimit:<provider>:blocked` = the time (ms) calls may resume. While it is in the
/// future no slot is granted anywhere (`WaitError.blocked`). Once it has passed, exactly one caller gets
/// the probe lease (`ratelimit:<provider>:probe`, SET NX with an expiry, so a probe whose process dies is
/// taken over); every other caller waits (polling, within `maxWait`) until the probe's outcome:
/// `liftBlock` (the provider answered) deletes both keys and normal slots resume; `block` again (another
/// 403) re-arms the pause; `releaseProbe` (no verdict: timeout, 5xx) lets the next caller probe. The block
/// key has no expiry: only an answer from the provider (or an operator's `DEL`) ends a block. A caller
/// that slept for its slot checks the block again before it sends, so a block that started meanwhile
/// stops it.
///
/// ## Threads
/// Stateless apart from its configuration; any number of threads may call it at once (each call
/// borrows a pooled Redis connection for one script run, never while sleeping).
public struct ProviderRateLimiter: Sendable {
    public let redis: RedisPool
    /// Next free send time (ms).
    public let key: String
    /// Resume time (ms) while the provider blocks us; absent otherwise.
    public let blockKey: String
    /// The probe lease after a block: its value is the probing caller's token.
    public let probeKey: String
    /// Milliseconds between two slots.
    public let intervalMilliseconds: Int
    public let maxWait: Double
    /// How long a probe lease lasts if its holder never reports (it died): the slot wait plus a request.
    public let probeLease: Double

    public init(redis: RedisPool, provider: String, minimumInterval: Double, maxWait: Double, probeLease: Double? = nil) {
        self.redis = redis
        self.key = "ratelimit:\(provider):next"
        self.blockKey = "ratelimit:\(provider):blocked"
        self.probeKey = "ratelimit:\(provider):probe"
        self.intervalMilliseconds = max(1, Int((minimumInterval * 1000).rounded(.up)))
        self.maxWait = maxWait
        self.probeLease = probeLease ?? (maxWait + 60)
    }

    /// KEYS[1] next-free key, KEYS[2] block key, KEYS[3] probe key; ARGV[1] interval ms; ARGV[2] longest
    /// acceptable wait ms; ARGV[3] this caller's probe token; ARGV[4] probe lease ms.
    /// Returns {status, ms, probe, slot}: status 1 granted (ms = wait, probe = 1 when this grant is the probe,
    /// slot = the slot's time), 0 backlog (ms = wait), 2 blocked (ms = until resume), 3 another caller probes
    /// (ms = its lease left).
    static let reserveScript = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local probe = 0
        local blocked = redis.call('GET', KEYS[2])
        if blocked then
            local resume = tonumber(blocked)
            if now < resume then return {2, resume - now, 0, 0} end
            if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', tonumber(ARGV[4])) then
                probe = 1
            else
                return {3, math.max(1, redis.call('PTTL', KEYS[3])), 0, 0}
            end
        end
        local interval = tonumber(ARGV[1])
        local nextFree = tonumber(redis.call('GET', KEYS[1]) or '0')
        local slot = math.max(now, nextFree)
        local wait = slot - now
        if wait > tonumber(ARGV[2]) then
            if probe == 1 then redis.call('DEL', KEYS[3]) end
            return {0, wait, 0, 0}
        end
        redis.call('SET', KEYS[1], slot + interval, 'PX', wait + interval + 60000)
        return {1, wait, probe, slot}
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

    /// KEYS[1] block key, KEYS[2] probe key; ARGV[1] pause ms, ARGV[2] the caller's probe token or "".
    /// Sets resume = now + pause; ends the caller's probe. Returns {1 when this call started the block, pause ms}.
    static let blockScript = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local started = 1 - redis.call('EXISTS', KEYS[1])
        redis.call('SET', KEYS[1], now + tonumber(ARGV[1]))
        if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
        return {started, tonumber(ARGV[1])}
        """)

    /// KEYS[1] block key; returns -1 when not blocked, else the ms until resume (0 once a probe may go).
    static let blockedScript = RedisScript("""
        local blocked = redis.call('GET', KEYS[1])
        if not blocked then return -1 end
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        return math.max(0, tonumber(blocked) - now)
        """)

    /// KEYS[1] block key, KEYS[2] probe key; ARGV[1] token, ARGV[2] 1 = lift the block, 0 = only release.
    static let endProbeScript = RedisScript("""
        if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
        if ARGV[2] == '1' then redis.call('DEL', KEYS[1], KEYS[2]) else redis.call('DEL', KEYS[2]) end
        return 1
        """)

    /// Why no slot was obtained.
    public enum WaitError: Error, Sendable, CustomStringConvertible {
        /// The queue of reserved slots is longer than `maxWait`; try again after `seconds`.
        case backlog(seconds: Double)
        /// The job was cancelled (timeout or shutdown) while it waited for its slot.
        case cancelled
        /// The provider blocks us (see `block`): nobody calls it for `seconds` more (0: a probe is due or
        /// under way, and it did not end within `maxWait`).
        case blocked(seconds: Double)

        public var description: String {
            switch self {
            case .backlog(let seconds): return "provider rate-limit backlog of \(Int(seconds.rounded(.up))) s exceeds the wait limit"
            case .cancelled: return "cancelled while waiting for a rate-limit slot"
            case .blocked(let seconds):
                return "the provider blocks this client; calls paused fleet-wide for \(Int(seconds.rounded(.up))) s more, then one probe"
            }
        }
    }

    /// A slot: the caller may send one request.
    public struct Grant: Sendable, Equatable {
        /// The slot's time (ms, Redis server clock); slots are at least `intervalMilliseconds` apart.
        public let slotMilliseconds: Int64
        /// Set when this request is the one probe after a block: report its outcome with `liftBlock`,
        /// `block` or `releaseProbe`.
        public let probeToken: String?
    }

    /// Reserves the next slot and sleeps until it comes; returns when the caller may send one request.
    /// Throws `WaitError` (backlog, cancelled, blocked) or a `RedisError`.
    public func acquire(isCancelled: () -> Bool) throws -> Grant {
        let token = UUID().uuidString.lowercased()
        let started = Date()
        while true {
            let reply = try redis.withConnection { connection in
                try connection.evaluate(Self.reserveScript, keys: [key, blockKey, probeKey],
                                        arguments: [intervalMilliseconds, Int(maxWait * 1000), token,
                                                    Int(probeLease * 1000)])
            }
            guard let parts = reply.array, parts.count == 4, let status = parts[0].integer, let ms = parts[1].integer,
                  let probe = parts[2].integer, let slot = parts[3].integer else {
                throw RedisError.unexpectedReply("unexpected rate-limit reply \(reply)")
            }
            switch status {
            case 1:
                let grant = Grant(slotMilliseconds: slot, probeToken: probe == 1 ? token : nil)
                CoreMetrics.Timer(label: "workers_rate_limiter_wait_seconds", dimensions: [("limiter", key)],
                                  preferredDisplayUnit: .seconds).recordMilliseconds(ms)
                do {
                    try sleepUntil(Date().addingTimeInterval(Double(ms) / 1000), isCancelled: isCancelled)
                } catch {
                    if let probeToken = grant.probeToken { try? releaseProbe(probeToken) }
                    throw error
                }
                // A block that started while this caller slept stops it (the probe itself goes ahead).
                if grant.probeToken == nil, let left = try blockedFor() { throw WaitError.blocked(seconds: left) }
                return grant
            case 2:
                throw WaitError.blocked(seconds: Double(ms) / 1000)
            case 3:
                // Another caller probes: wait for its outcome, within the same patience as for a slot.
                let waited = Date().timeIntervalSince(started)
                if waited >= maxWait { throw WaitError.blocked(seconds: 0) }
                try sleepUntil(Date().addingTimeInterval(min(0.2, maxWait - waited)), isCancelled: isCancelled)
            default:
                throw WaitError.backlog(seconds: Double(ms) / 1000)
            }
        }
    }

    private func sleepUntil(_ until: Date, isCancelled: () -> Bool) throws(WaitError) {
        while true {
            if isCancelled() { throw .cancelled }
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

    /// The provider refused us (403): no process calls it for `seconds`, then one probe. Ends the caller's
    /// probe (`probeToken`) if it was one. Returns true for the one call, fleet-wide, that started this block
    /// (a failed probe or a concurrent 403 extends the block: false).
    @discardableResult
    public func block(seconds: Double, probeToken: String?) throws -> Bool {
        let milliseconds = max(1, Int((seconds * 1000).rounded(.up)))
        let reply = try redis.withConnection { connection in
            try connection.evaluate(Self.blockScript, keys: [blockKey, probeKey],
                                    arguments: [milliseconds, probeToken ?? ""])
        }
        return reply.array?.first?.integer == 1
    }

    /// Seconds until calls resume while blocked (0 once a probe is due); nil when not blocked.
    public func blockedFor() throws -> Double? {
        let reply = try redis.withConnection { connection in
            try connection.evaluate(Self.blockedScript, keys: [blockKey])
        }
        guard let ms = reply.integer, ms >= 0 else { return nil }
        return Double(ms) / 1000
    }

    /// The probe got an answer that is not a block: the block ends, every caller gets slots again.
    public func liftBlock(probeToken: String) throws {
        _ = try redis.withConnection { connection in
            try connection.evaluate(Self.endProbeScript, keys: [blockKey, probeKey], arguments: [probeToken, "1"])
        }
    }

    /// The probe got no verdict (timeout, 5xx): the next caller probes.
    public func releaseProbe(_ probeToken: String) throws {
        _ = try redis.withConnection { connection in
            try connection.evaluate(Self.endProbeScript, keys: [blockKey, probeKey], arguments: [probeToken, "0"])
        }
    }
}
