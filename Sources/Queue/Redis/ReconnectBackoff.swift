import Foundation
import Synchronization

/// The one reconnect rule of every thread that talks to Redis (fetcher, waiters, settler, heartbeat, housekeeper,
/// scheduler, outbox relay and its finder, the metrics and dashboard readers): after `n` failures in a row, wait
/// `min(cap, 0.1 s × 2^(n−1))`, jittered down by up to a half, before the next try. A success resets it.
///
/// The jitter keeps a fleet that lost Redis together from coming back in step (a reconnect storm on a Redis that is
/// starting). The wait is the loop's own: no poll, sweep or tick deadline may shorten it (`wait(while:)` only
/// returns early when its caller is stopping). `ConnectThrottle` enforces the same rule per server for the whole
/// process, so a loop that forgets to wait still cannot reconnect faster than it.
///
/// Thread rules: a value owned by one thread (the loop that uses it).
package struct ReconnectBackoff: Sendable {
    /// The first delay, in seconds.
    package static let first = 0.1
    /// Failures in a row since the last success.
    package private(set) var failures = 0
    /// The longest delay, in seconds.
    package let cap: Double

    package init(cap: Double = 5) { self.cap = max(Self.first, cap) }

    /// The delay after `failures` failures in a row (≥ 1): `min(cap, 0.1 × 2^(failures−1))`, times a random factor in
    /// 0.5…1. Never more than `cap`, never less than 0.05 s, whatever `failures` is.
    package static func delay(afterFailures failures: Int, cap: Double) -> Double {
        let exponent = Double(min(max(failures, 1) - 1, 32))
        let ceiling = min(cap, first * pow(2, exponent))
        return ceiling * Double.random(in: 0.5...1)
    }

    /// Records one failure and returns the delay to wait before the next try.
    package mutating func failed() -> Double {
        failures = min(failures + 1, 1 << 20)
        return Self.delay(afterFailures: failures, cap: cap)
    }

    /// Records one failure and sleeps its delay, in slices of at most 0.1 s; returns early only when `keepGoing`
    /// turns false (the caller is stopping).
    package mutating func wait(while keepGoing: () -> Bool = { true }) {
        let until = Date(timeIntervalSinceNow: failed())
        while keepGoing() {
            let left = until.timeIntervalSinceNow
            if left <= 0 { break }
            Thread.sleep(forTimeInterval: min(0.1, left))
        }
    }

    /// A try succeeded.
    package mutating func reset() { failures = 0 }
}

/// Connection attempts to each Redis server, for the whole process: once an attempt to reach a server got no
/// reply (refused, timed out, or a link that closed before its first reply), the next attempt to it waits for
/// `ReconnectBackoff`'s delay, and only one attempt at a time is let through; the others are refused at once,
/// without a system call, with the last failure as their reason. A reply from the server clears it. While a
/// server answers, attempts are never held: after a Redis restart every thread reconnects at once.
///
/// This is what keeps the rule by construction: every `RedisConnection` connects through it, so no thread — one
/// written later included — can open connections faster than the rule, whatever its loop does.
///
/// Thread rules: any thread; all state under one mutex, held for a few instructions (never across I/O).
final class ConnectThrottle: Sendable {
    static let shared = ConnectThrottle()
    /// The longest a server is held back between two attempts, in seconds.
    static let cap = 2.0

    private struct Server {
        var failures = 0
        var nextAttempt: Double = 0
        var lastReason = ""
    }
    private let servers = Mutex<[String: Server]>([:])

    /// Lets an attempt to `server` through, or throws `.connectionFailed` when the server failed lately and its
    /// delay has not run out (or another thread's attempt holds the slot).
    func admit(_ server: String, address: String) throws(RedisError) {
        let now = Date().timeIntervalSince1970
        let refusal: (reason: String, wait: Double)? = servers.withLock { servers in
            guard var state = servers[server], state.failures > 0 else { return nil }
            if now < state.nextAttempt { return (state.lastReason, state.nextAttempt - now) }
            // This attempt holds the slot until it fails or is answered.
            state.nextAttempt = now + ReconnectBackoff.delay(afterFailures: state.failures, cap: Self.cap)
            servers[server] = state
            return nil
        }
        if let refusal {
            throw .connectionFailed(address: address, reason: "\(refusal.reason) (reconnect backoff: next attempt in \(String(format: "%.2f", refusal.wait)) s)")
        }
    }

    /// An attempt to `server` got no reply.
    func failed(_ server: String, reason: String) {
        let now = Date().timeIntervalSince1970
        servers.withLock { servers in
            var state = servers[server] ?? Server()
            state.failures = min(state.failures + 1, 1 << 20)
            state.nextAttempt = now + ReconnectBackoff.delay(afterFailures: state.failures, cap: Self.cap)
            state.lastReason = reason
            servers[server] = state
        }
    }

    /// `server` answered.
    func answered(_ server: String) {
        servers.withLock { servers in
            if servers[server] != nil { servers[server] = nil }
        }
    }

    /// Failures in a row recorded for `server` (0 while it answers).
    func failures(_ server: String) -> Int { servers.withLock { $0[server]?.failures ?? 0 } }
}
