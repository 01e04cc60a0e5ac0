import Foundation

/// A process as Sidekiq's `ProcessSet` shows it (§10 of the wire doc).
public struct ProcessEntry: Sendable, Equatable {
    public var identity: String
    public var info: JSONObject
    public var busy: Int
    public var beat: Double
    public var quiet: Bool
    public var rssKilobytes: Int
    public var rttMicroseconds: Int

    public var hostname: String { info["hostname"]?.stringValue ?? "" }
    public var pid: Int { Int(info["pid"]?.intValue ?? 0) }
    public var concurrency: Int { Int(info["concurrency"]?.intValue ?? 0) }
    public var startedAt: Double { info["started_at"]?.doubleValue ?? 0 }
    public var queues: [String] { info["queues"]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    /// The job classes the process registered (ours: `classes` in `info`, at most `SidekiqProcessInfo`'s cap); nil
    /// when it does not say (a Ruby Sidekiq process, an older worker, or more classes than the cap).
    public var registeredClasses: Set<String>? {
        guard info["classes_truncated"]?.boolValue != true,
              let names = info["classes"]?.arrayValue?.compactMap(\.stringValue) else { return nil }
        return Set(names)
    }
    public var tag: String { info["tag"]?.stringValue ?? "" }
    /// The `args_version`s the process decodes for `className` (`arg_versions` in `info`, ours: `[lowest, highest]`);
    /// nil when it does not say (the class is unversioned there, or the process announces none).
    public func argumentVersions(of className: String) -> ClosedRange<Int>? {
        guard let pair = info["arg_versions"]?.objectValue?[className]?.arrayValue, pair.count == 2,
              let low = pair[0].intValue, let high = pair[1].intValue, low <= high,
              let lower = Int(exactly: low), let upper = Int(exactly: high) else { return nil }
        return lower...upper
    }
}

/// Reading and signalling the process registry, the way Sidekiq's API does.
package enum ProcessRegistry {
    /// The heartbeat of a process whose Redis is full (docs/redis-full.md), in one script Redis accepts at
    /// `maxmemory`: `EXPIRE` keeps the process hash and the fetcher heartbeat alive (so no orphan sweep takes this
    /// live process's jobs), the busy hashes are unlinked (they would be stale), and a signal is popped. Only a
    /// fetcher heartbeat that is missing (a process starting on a full Redis) is created: `SET` is refused at
    /// `maxmemory`, but not after a script's first write (the `EXPIRE`s), and those ~100 bytes are what stops the
    /// fleet running this process's jobs twice. Returns the signal popped, if any, and whether the heartbeat was made.
    package static func fullBeat(_ connection: RedisConnection, identity: String,
                                 fetcherHeartbeatTTL: Int) throws(RedisError) -> (signal: String?, created: Bool) {
        let reply = try connection.evaluate(fullBeatScript, keys: [
            Keys.process(identity), Keys.workers(identity), Keys.work(identity),
            Keys.fetcherHeartbeat(identity: identity), Keys.signals(identity)], arguments: [max(1, fetcherHeartbeatTTL)])
        let parts = reply.array ?? []
        return (parts.count > 1 ? parts[1].string : nil, parts.first?.integer == 1)
    }

    /// KEYS: process hash, workers hash (Sidekiq 6), work hash (7/8), fetcher heartbeat, signal list; ARGV[1]: the
    /// heartbeat's TTL.
    private static let fullBeatScript = RedisScript("""
        redis.call('EXPIRE', KEYS[1], 60)
        redis.call('UNLINK', KEYS[2], KEYS[3])
        local created = 0
        if redis.call('EXPIRE', KEYS[4], ARGV[1]) == 0 then
          redis.call('SET', KEYS[4], '1', 'EX', ARGV[1])
          created = 1
        end
        return {created, redis.call('RPOP', KEYS[5])}
        """)

    /// Removes members of `processes` whose hash has no `info` (expired: the process is gone),
    /// like `Sidekiq::ProcessSet.new`'s cleanup. Returns the number removed.
    @discardableResult
    public static func prune(_ connection: RedisConnection) throws(RedisError) -> Int {
        let members = try connection.command("SMEMBERS", Keys.processes).strings
        if members.isEmpty { return 0 }
        let infos = try connection.pipeline(members.map { ["HGET", Keys.process($0), "info"] })
        let gone = zip(members, infos).filter { $0.1.isNull }.map(\.0)
        if gone.isEmpty { return 0 }
        let arguments: [any RedisArgument] = ["SREM", Keys.processes] + gone
        try connection.send(arguments).checked()
        return gone.count
    }

    /// The live processes, sorted by identity (entries whose hash expired are skipped). With a `budget`, only the
    /// members of `processes` it allows (`SSCAN`, one entry each; `budget.exhausted` when some were left unread).
    public static func list(_ connection: RedisConnection, budget: ScanBudget? = nil) throws(RedisError) -> [ProcessEntry] {
        let members: [String]
        if let budget { members = try budget.members(of: Keys.processes, connection).sorted() } else {
            members = try connection.command("SMEMBERS", Keys.processes).strings.sorted()
        }
        if members.isEmpty { return [] }
        let replies = try connection.pipeline(members.map {
            ["HMGET", Keys.process($0), "info", "busy", "beat", "quiet", "rss", "rtt_us", "concurrency"]
        })
        var entries: [ProcessEntry] = []
        for (identity, reply) in zip(members, replies) {
            guard let fields = reply.array, fields.count == 7, let infoText = fields[0].string,
                  var info = try? JSONValue.parse(infoText).objectValue else { continue }
            // Sidekiq 8 keeps `concurrency` in the hash, not in `info` (v8.1.7 launcher.rb `❤`); 6 and 7 in `info`.
            if let concurrency = fields[6].integer { info["concurrency"] = .int(concurrency) }
            entries.append(ProcessEntry(identity: identity, info: info, busy: Int(fields[1].integer ?? 0),
                                        beat: fields[2].double ?? 0, quiet: fields[3].string == "true",
                                        rssKilobytes: Int(fields[4].integer ?? 0),
                                        rttMicroseconds: Int(fields[5].integer ?? 0)))
        }
        return entries
    }

    /// Sends a Sidekiq signal (`TSTP` quiet, `TERM` stop, `TTIN` dump) through the process's
    /// signal list; the process acts on it at its next heartbeat. Works for Ruby processes too.
    public static func signal(_ connection: RedisConnection, identity: String, _ signal: String) throws(RedisError) {
        // EXEC runs every command and reports a refusal (a signals key of another type) in its reply: checked, so a
        // signal Redis refused is an error, never a silent success (scripts/check-sources' transaction rule).
        for reply in try connection.transaction([["LPUSH", Keys.signals(identity), signal],
                                                 ["EXPIRE", Keys.signals(identity), 60]]) { try reply.checked() }
    }
}
