import Foundation
import WorkersQueue

/// The fleet-wide block switch for one provider that refuses us (Nominatim's 403 under its usage policy,
/// https://operations.osmfoundation.org/policies/nominatim/), kept in Redis so that it holds across every
/// worker process and thread. The request rate itself is a `CallLimiter` (docs/limiters.md); this type only
/// knows whether the provider may be called at all.
///
/// `block` writes `ratelimit:<provider>:blocked` = the time (ms, Redis clock) calls may resume. While it is
/// in the future `enter` refuses everybody (`Blocked`). Once it has passed, exactly one caller gets the probe
/// lease (`ratelimit:<provider>:probe`, SET NX with an expiry, so a probe whose process dies is taken over);
/// every other caller waits (polling, within `patience`) for the probe's outcome: `liftBlock` (the provider
/// answered) deletes both keys and calls resume; `block` again (another 403) re-arms the pause;
/// `releaseProbe` (no verdict: timeout, 5xx) lets the next caller probe. The block key has no expiry: only an
/// answer from the provider (or an operator's `DEL`) ends a block.
///
/// Threads: stateless apart from its configuration; any number of threads may call it at once (each call
/// borrows a pooled Redis connection for one script run, never while sleeping).
public struct ProviderBlock: Sendable {
    public let redis: RedisPool
    /// Resume time (ms) while the provider blocks us; absent otherwise.
    public let blockKey: String
    /// The probe lease after a block: its value is the probing caller's token.
    public let probeKey: String
    /// How long `enter` waits for another caller's probe to end.
    public let patience: Double
    /// How long a probe lease lasts if its holder never reports (it died): the wait for a rate slot plus a request.
    public let probeLease: Double

    public init(redis: RedisPool, provider: String, patience: Double, probeLease: Double? = nil) {
        self.redis = redis
        self.blockKey = GeoKeys.blocked(provider: provider)
        self.probeKey = GeoKeys.probe(provider: provider)
        self.patience = patience
        self.probeLease = probeLease ?? (patience + 60)
    }

    /// The provider blocks us: nobody calls it for `seconds` more (0: a probe is due or under way, and it did
    /// not end within `patience`).
    public struct Blocked: Error, Sendable, Equatable {
        public let seconds: Double
    }

    /// The caller may call the provider. `probeToken` is set when this call is the one probe after a block:
    /// report its outcome with `liftBlock`, `block` or `releaseProbe`.
    public struct Pass: Sendable, Equatable {
        public let probeToken: String?
    }

    /// Lets the caller through when no block is in force (or makes it the probe once the pause is over).
    /// Throws `Blocked` (also when the wait for another caller's probe runs out or is cancelled: `seconds` 0).
    public func enter(isCancelled: () -> Bool) throws -> Pass {
        let token = UUID().uuidString.lowercased()
        let started = Date()
        while true {
            let reply = try redis.withConnection { connection in
                try connection.evaluate(Self.enterScript, keys: [blockKey, probeKey],
                                        arguments: [token, Int(probeLease * 1000)])
            }
            guard let parts = reply.array, parts.count == 2, let status = parts[0].integer, let ms = parts[1].integer else {
                throw RedisError.unexpectedReply("unexpected provider-block reply \(reply)")
            }
            switch status {
            case 1: return Pass(probeToken: nil)
            case 4: return Pass(probeToken: token)
            case 2: throw Blocked(seconds: Double(ms) / 1000)
            default:
                // Another caller probes: wait for its outcome, within `patience`.
                let waited = Date().timeIntervalSince(started)
                if waited >= patience || isCancelled() { throw Blocked(seconds: 0) }
                Thread.sleep(forTimeInterval: min(0.2, patience - waited))
            }
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

    /// The probe got an answer that is not a block: the block ends, every caller may call again.
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
