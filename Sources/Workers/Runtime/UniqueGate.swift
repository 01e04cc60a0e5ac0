import CoreMetrics
import Foundation
import Logging
import WorkersQueue

/// The fetch-time check of unique jobs (docs/unique-jobs.md): jobs pushed by clients that do not
/// check (Ruby's Sidekiq OSS client) are caught here, before they reach the buffer.
///
/// For each fetched job whose payload asks for uniqueness (`unique_for`) or whose class declares
/// it (`JobOptions.unique`), one script call per batch (`UniqueLocks.claim`) decides: the job takes
/// (or keeps) its lock and runs, or another jid holds the lock and this job is a duplicate.
/// Duplicates are handed to the settler as `.drop` (they leave the in-flight list only through
/// the settler, like every job) with a log line and `workers_unique_duplicates_dropped_total`.
///
/// Thread rules: immutable; called only by the fetcher thread with one of the fetcher's connections, which it opens
/// (the autoclosure) only when a job may be unique.
/// Jobs of other classes cost a byte search, not a parse.
struct UniqueGate: Sendable {
    private let registry: JobRegistry
    private let defaultTimeout: Double?
    /// `"class":"Name"` of every registered class that declares uniqueness.
    private let classNeedles: [[UInt8]]
    private static let payloadNeedle = Array("\"unique_for\"".utf8)

    init(registry: JobRegistry, configuration: WorkerConfiguration) {
        self.registry = registry
        self.defaultTimeout = configuration.defaultTimeout?.inSeconds
        classNeedles = registry.classNames.filter { registry.options(for: $0)?.unique != nil }
            .map { Array("\"class\":\"\($0)\"".utf8) }
    }

    /// What to do with a fetched batch: the jobs to run (those owning a lock carry `uniqueJid`),
    /// and the duplicates with the jid holding their lock.
    struct Sorted {
        var run: [FetchedJob] = []
        var duplicates: [(job: FetchedJob, jid: String, className: String, holder: String)] = []
    }

    func check(_ connection: @autoclosure () throws(RedisError) -> RedisConnection,
               _ jobs: [FetchedJob]) throws(RedisError) -> Sorted {
        var sorted = Sorted()
        var candidates: [(index: Int, candidate: UniqueLocks.Candidate)] = []
        sorted.run = jobs
        for (index, job) in jobs.enumerated() where mayBeUnique(job.raw) {
            guard let payload = try? JobPayload(parsing: job.raw), let jid = payload.jid, !jid.isEmpty else { continue }
            let options = registry.options(for: payload.className)
            guard let policy = UniquePolicy.requested(by: payload) ?? options?.unique else { continue }
            let timeout = options.map { o in defaultTimeout.map { min($0, o.timeout.inSeconds) } ?? o.timeout.inSeconds } ?? defaultTimeout ?? 1800
            var effective = policy
            if effective.key == nil, let declared = options?.unique { effective.key = declared.key }
            candidates.append((index, UniqueLocks.Candidate(
                jid: jid, lock: UniqueLockKey(payload: payload, policy: effective), policy: policy,
                className: payload.className, queue: payload.queue ?? job.queue,
                ttlSeconds: max(policy.seconds, timeout + 60))))
        }
        if candidates.isEmpty { return sorted }
        let claims = try UniqueLocks.claim(connection(), candidates.map(\.candidate))
        var dropped = Set<Int>()
        for ((index, candidate), claim) in zip(candidates, claims) {
            switch claim {
            case .holding: sorted.run[index].uniqueJid = candidate.jid
            case .free: break
            case .duplicate(let holder):
                dropped.insert(index)
                sorted.duplicates.append((jobs[index], candidate.jid, candidate.className, holder))
            }
        }
        sorted.run = sorted.run.enumerated().filter { !dropped.contains($0.offset) }.map(\.element)
        return sorted
    }

    /// Logs and counts a dropped duplicate (jids and class only: args may hold personal data).
    func reportDropped(jid: String, className: String, queue: String, holder: String, logger: Logger) {
        logger.notice("unique job: duplicate dropped at fetch, the lock is held by another job",
                      metadata: ["jid": "\(jid)", "class": "\(className)", "queue": "\(queue)", "holder": "\(holder)"])
        let label = registry.options(for: className) == nil ? "_unregistered" : className
        Counter(label: "workers_unique_duplicates_dropped_total", dimensions: [("class", label)]).increment()
    }

    /// Whether the payload contains `"unique_for"` or `"class":"<a unique class>"`: one pass over the bytes, looking
    /// only after each `"` (a naive search per needle cost 3 % of a no-op drain's CPU in `perf`).
    private func mayBeUnique(_ raw: [UInt8]) -> Bool {
        raw.withUnsafeBufferPointer { bytes in
            let quote = UInt8(ascii: "\""), u = UInt8(ascii: "u"), c = UInt8(ascii: "c")
            var index = 0
            while index + 1 < bytes.count {
                if bytes[index] == quote {
                    let next = bytes[index + 1]
                    if next == u, Self.matches(bytes, at: index, Self.payloadNeedle) { return true }
                    if next == c, classNeedles.contains(where: { Self.matches(bytes, at: index, $0) }) { return true }
                }
                index += 1
            }
            return false
        }
    }

    private static func matches(_ bytes: UnsafeBufferPointer<UInt8>, at start: Int, _ needle: [UInt8]) -> Bool {
        guard start + needle.count <= bytes.count else { return false }
        for offset in needle.indices where bytes[start + offset] != needle[offset] { return false }
        return true
    }
}
