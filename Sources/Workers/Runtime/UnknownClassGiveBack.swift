import Foundation
import Logging
import WorkersQueue
import Synchronization

/// A job whose class this process does not register — or whose arguments version (`args_version`) it does not
/// decode while a live process announces that version — during a rolling deploy or the last steps of a migration
/// from Ruby (docs/deploy.md, "Rolling deploys"): it is given back to `schedule` with a backoff that grows per give-back,
/// spending no retry, while a live process serving its queue announces the class or announces nothing (Ruby Sidekiq,
/// an older release: it may know it); it goes to `dead` only once no live process serving the queue has known it
/// for `WorkerConfiguration.unknownClassGrace`.
///
/// Bookkeeping in the payload, in fields Ruby Sidekiq ignores: `unknown_class_count` (give-backs so far) and
/// `unknown_class_since` (when a process first found that nobody knows the class; dropped again as soon as one
/// may).
///
/// Pure decisions; the registry is read by `ClassDirectory`.
enum UnknownClassGiveBack {
    /// The longest wait between two give-backs, in seconds.
    static let maxDelay = 300.0

    /// The wait after `giveBacks` earlier give-backs: 1 s while a live process serving the queue announces the class
    /// (it will take the job soon: a job that meets old workers again is not pushed further back each time);
    /// otherwise 1 s doubling to 5 minutes. Jittered by ±25 %.
    static func delay(afterGiveBacks giveBacks: Int, announced: Bool) -> Double {
        let base = announced ? 1 : min(maxDelay, pow(2, Double(min(max(giveBacks, 0), 16))))
        return base * Double.random(in: 0.75...1.25)
    }

    /// The settlement of `payload` (class not registered here) on `queue`, given what the live processes announce
    /// (`knowledge`; nil when the registry could not be read: given back, nothing is decided on no information).
    static func settlement(payload: JobPayload, queue: String, knowledge: ClassKnowledge?, grace: Double,
                           now: Double, logger: Logger, why: String = "class not registered here") -> RunResult {
        let giveBacks = Int(payload.fields["unknown_class_count"]?.intValue.map { Bounded.int($0, in: 0...Bounded.maxCount) } ?? 0)
        var next = payload
        switch knowledge {
        case .nobody(let serving)?:
            // From Redis: any writer may have put any number there (docs/hostile-input.md); outside an epoch, now.
            let since = Bounded.epochSeconds(payload.fields["unknown_class_since"]?.doubleValue).map { min($0, now) } ?? now
            if now - since >= grace {
                let reason = "unknown job class '\(payload.className)': no live process serving queue '\(queue)' has registered it for \(Int(now - since)) s (unknown-class grace \(Int(grace)) s; \(serving) serve the queue)"
                logger.warning("unknown job class sent to dead: no live process knows it", metadata: [
                    "class": "\(payload.className)", "queue": "\(queue)", "grace_s": "\(Int(grace))"])
                return .failed(.dead(payload: payload.recordingFailure(queue: queue, errorClass: "BadInput", message: reason)))
            }
            next.fields["unknown_class_since"] = .double(since)
        case .announced?, .mayKnow?, nil:
            next.fields["unknown_class_since"] = nil
        }
        next.fields["unknown_class_count"] = .int(Int64(giveBacks + 1))
        let announced: Bool
        if case .announced? = knowledge { announced = true } else { announced = false }
        let delay = delay(afterGiveBacks: giveBacks, announced: announced)
        logger.info("job given back for a process that knows it", metadata: [
            "why": "\(why)", "class": "\(payload.className)", "queue": "\(queue)", "give_backs": "\(giveBacks + 1)",
            "delay_s": "\(Int(delay.rounded()))", "known_by": "\(Self.describe(knowledge))"])
        return .settled(.schedule(payload: next.serialized(), at: now + delay), counts: [])
    }

    static func describe(_ knowledge: ClassKnowledge?) -> String {
        switch knowledge {
        case .announced(let identities)?: return "announced by \(identities.prefix(5).joined(separator: ","))"
        case .mayKnow(let identities)?: return "perhaps \(identities.prefix(5).joined(separator: ",")) (they announce no classes)"
        case .nobody(let serving)?: return "nobody (\(serving) serve the queue)"
        case nil: return "unknown (the process registry could not be read)"
        }
    }
}

/// The live processes of each shard, as their registry entries announce them, for `UnknownClassGiveBack`: read at
/// most every `maxAge` seconds per shard (a give-back storm reads the registry once, not once a job).
///
/// Thread rules: any pool thread; the cache under one mutex (never held across I/O), one small connection pool per
/// shard.
final class ClassDirectory: Sendable {
    static let maxAge = 5.0
    private let pools: [RedisPool]
    private let identity: String
    private let cache = Mutex<[Int: (at: Double, processes: [ProcessEntry])]>([:])

    init(shardMap: ShardMap, identity: String) {
        pools = shardMap.shards.map { RedisPool(endpoint: $0.endpoint, maxConnections: 1, commandTimeout: .seconds(2)) }
        self.identity = identity
    }

    /// What the live processes of `shard` (other than this one) know of `className` on `queue`; nil when the
    /// registry cannot be read.
    func knowledge(of className: String, queue: String, shard: Int, argumentsVersion: Int? = nil) -> ClassKnowledge? {
        let now = Clock.now()
        var processes = cache.withLock { $0[shard].flatMap { now - $0.at < Self.maxAge ? $0.processes : nil } }
        if processes == nil, pools.indices.contains(shard) {
            processes = try? pools[shard].withConnection { try ProcessRegistry.list($0) }
            if let processes { cache.withLock { $0[shard] = (now, processes) } }
        }
        return processes.map {
            ClassKnowledge.of(className: className, queue: queue, processes: $0, excluding: identity, argumentsVersion: argumentsVersion)
        }
    }
}

/// A job whose personal arguments cannot be opened now because the key store fails (PostgreSQL unreachable, its table
/// away): not the job's fault, so it spends no retry — it waits in `schedule`, 1 s doubling to 60 s (jittered), counted
/// in the payload's `key_store_waits` (Ruby ignores it), until a worker opens it (issue 50 point 4; the health table in
/// docs/metrics-and-health.md). Every class without personal arguments runs on meanwhile.
enum KeyStoreWait {
    static let maxDelay = 60.0

    static func settlement(payload: JobPayload, reason: String, now: Double, logger: Logger) -> RunResult {
        let waits = Int(payload.fields["key_store_waits"]?.intValue.map { Bounded.int($0, in: 0...Bounded.maxCount) } ?? 0)
        var next = payload
        next.fields["key_store_waits"] = .int(Int64(waits + 1))
        let delay = min(maxDelay, pow(2, Double(min(waits, 16)))) * Double.random(in: 0.75...1.25)
        logger.warning("personal arguments cannot be opened now (key store); the job waits, spending no retry", metadata: [
            "alert": "key_store_unavailable", "waits": "\(waits + 1)", "delay_s": "\(Int(delay.rounded()))", "error": "\(reason)"])
        return .settled(.schedule(payload: next.serialized(), at: now + delay), counts: [])
    }
}
