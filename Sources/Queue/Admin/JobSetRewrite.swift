import Foundation

/// Rewrites entries of the `retry` and `dead` sorted sets in place: each entry is parsed and given to a transform,
/// and an entry the transform changes is replaced, at its score, by the new bytes — only if the old bytes are still
/// there (`AdminScripts.replaceMember`: a job retried, killed or deleted meanwhile is left as it went). Used by the
/// one-off scrub of error texts written before opened values were scrubbed (`OpenedErrorScrub`, docs/jobs-privacy.md).
///
/// Scans with `ZSCAN` in pages of `pageSize` (an entry may be seen twice: a transform must return nil for an entry it
/// already rewrote). With several shards every step runs on every shard. Thread rules: a value; borrows connections
/// per call, so any thread may call. Not atomic across entries.
package struct JobSetRewrite: Sendable {
    public let pools: [RedisPool]
    public var pageSize = 500
    /// The sets rewritten.
    public static let sets = [Keys.retry, Keys.dead]

    public init(pools: [RedisPool]) { self.pools = pools }

    public struct Report: Sendable, Equatable {
        /// Entries read (an entry seen twice by ZSCAN counts twice).
        public var scanned = 0
        /// Entries replaced (or, in a dry run, that would be).
        public var rewritten = 0
        /// Entries the transform changed that had moved before they could be replaced.
        public var moved = 0
        public init() {}
    }

    /// Runs `transform` over every parseable entry of `retry` and `dead` on every shard; `dryRun`: nothing written.
    /// `transform` may throw to stop the pass (what was replaced stays replaced).
    public func rewrite(dryRun: Bool, _ transform: (JobPayload) throws -> JobPayload?) throws -> Report {
        var report = Report()
        for pool in pools {
            for key in Self.sets {
                try pool.withConnection { conn in
                    var cursor = "0"
                    repeat {
                        let reply = try conn.command("ZSCAN", key, cursor, "COUNT", pageSize)
                        guard let parts = reply.array, parts.count == 2, let next = parts[0].string,
                              let entries = parts[1].array else { throw RedisError.unexpectedReply("ZSCAN returned \(reply)") }
                        cursor = next
                        for index in stride(from: 0, to: entries.count - 1, by: 2) {
                            guard let member = entries[index].bytes else { continue }
                            report.scanned += 1
                            guard let payload = try? JobPayload(parsing: member), let changed = try transform(payload) else { continue }
                            let bytes = Array(changed.serialized().utf8)
                            guard bytes != member else { continue }
                            if dryRun { report.rewritten += 1; continue }
                            let replaced = try conn.evaluate(AdminScripts.replaceMember, keys: [key], arguments: [member, bytes])
                                .checked().integer ?? 0
                            if replaced == 1 { report.rewritten += 1 } else { report.moved += 1 }
                        }
                    } while cursor != "0"
                }
            }
        }
        return report
    }
}
