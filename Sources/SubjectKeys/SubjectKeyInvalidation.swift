import Foundation
import WorkersQueue

/// The fleet-wide "a subject key was erased" signal: an integer in Redis (`subject-keys:erased`) that every
/// erasure increments after its commit. Each worker's `SubjectArgumentsOpener` reads it at most once per
/// `epochCheckInterval` (default 1 s) and drops its whole cache of unwrapped keys when it changed, so no process
/// opens an erased person's job with a cached key for longer than that interval (a process that cannot read it
/// drops its cache too).
public enum SubjectKeyInvalidation {
    public static let key = ErasureKeys.erased

    /// Increments the epoch on every pool (every shard: a worker reads its default shard). Call after the commit
    /// that deleted keys.
    public static func announce(on pools: [RedisPool]) throws {
        for pool in pools {
            try pool.withConnection { connection in _ = try connection.command("INCR", key).checked() }
        }
    }

    /// The current epoch (0 when never set).
    static func epoch(on pool: RedisPool) throws -> Int64 {
        try pool.withConnection { connection in
            let reply = try connection.command("GET", key).checked()
            return reply.string.flatMap { Int64($0) } ?? 0
        }
    }
}
