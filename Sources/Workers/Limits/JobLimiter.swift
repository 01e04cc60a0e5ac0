import Foundation
import Logging
import WorkersQueue
import Synchronization

/// Admits jobs through their class's limits (`JobOptions.limits`) and keeps the concurrency leases of this
/// process's running jobs alive until they end.
///
/// Thread rules: pool threads call `admit` and `release` (each borrows a pooled Redis connection for one
/// call); the renewal thread `limiter-leases` (started on the first lease, ends once this object is gone)
/// is the only one that renews. The set of held leases is behind a mutex.
///
/// Invariant: a lease is in `held` from its admission until `release`; while there, it is renewed every
/// `lease / 3` (and at least once a second), so it expires only when this process stops renewing (killed,
/// frozen) — then another process's admission reclaims the slot (`LimitScripts.admit` drops expired leases).
final class JobLimiter: Sendable {
    private let redis: RedisPool
    private let logger: Logger
    private let held = Mutex<Set<LimitLease>>([])
    private let declared = Mutex<Set<String>>([])
    private let renewerStarted = Atomic<Bool>(false)

    init(endpoint: RedisEndpoint, logger: Logger) {
        self.redis = RedisPool(endpoint: endpoint, maxConnections: 4)
        self.logger = logger
    }

    /// Tries to admit the job of `payload` through `limits`. On admission its leases are held (renewed) until
    /// `release`. Publishes the declarations in `limits` on first use in this process.
    func admit(_ limits: JobLimits, payload: JobPayload) throws -> LimitAdmission {
        let specs = limits.declarations.map(\.spec)
        let undeclared = declared.withLock { names in specs.filter { !names.contains($0.name) } }
        let instances: [LimitStore.Instance] = limits.declarations.map { ($0.spec, $0.instanceKey(args: payload.args)) }
        let admission = try redis.withConnection { connection in
            if !undeclared.isEmpty { try LimitStore.declare(connection, undeclared) }
            return try LimitStore.admit(connection, instances)
        }
        if !undeclared.isEmpty { declared.withLock { $0.formUnion(undeclared.map(\.name)) } }
        if case .admitted(let leases, _) = admission, !leases.isEmpty {
            held.withLock { $0.formUnion(leases) }
            startRenewer()
        }
        return admission
    }

    /// Frees `leases` (their job ended). A failure to reach Redis is logged: the leases then expire.
    func release(_ leases: [LimitLease]) {
        if leases.isEmpty { return }
        held.withLock { $0.subtract(leases) }
        do {
            try redis.withConnection { try LimitStore.release($0, leases) }
        } catch {
            logger.warning("could not release limiter leases; they expire on their own",
                           metadata: ["error": "\(error)", "leases": "\(leases.count)"])
        }
    }

    private func startRenewer() {
        guard !renewerStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [weak self] in
            while let interval = self?.renewOnce() {
                Thread.sleep(forTimeInterval: interval)
            }
        }
        thread.name = "limiter-leases"
        thread.start()
    }

    /// Renews every held lease once; returns the seconds until the next round.
    private func renewOnce() -> Double {
        let leases = Array(held.withLock { $0 })
        let shortest = leases.map(\.milliseconds).min() ?? 3000
        let interval = min(1, Double(shortest) / 3000)
        if leases.isEmpty { return interval }
        do {
            let renewed = try redis.withConnection { try LimitStore.renew($0, leases) }
            // A lease released meanwhile also counts as not renewed; only report what is still held.
            let stillHeld = held.withLock { $0.intersection(leases).count }
            if renewed < stillHeld {
                LimiterMetrics.leaseLost(stillHeld - renewed)
                logger.warning("limiter leases had expired before renewal; their slots may be in use twice",
                               metadata: ["lost": "\(stillHeld - renewed)"])
            }
        } catch {
            logger.warning("could not renew limiter leases", metadata: ["error": "\(error)"])
        }
        return interval
    }
}
