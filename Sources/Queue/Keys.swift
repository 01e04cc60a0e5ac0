import Foundation
/// The Redis key layout, as Sidekiq 6.4.1 and gitlab-sidekiq-fetcher write it (no prefix).
/// See `shared/docs/sidekiq-wire-format.md` §1.
package enum Keys {
    /// SET of queue names.
    public static let queues = "queues"
    /// ZSET of jobs to run later (score = run time).
    public static let schedule = "schedule"
    /// ZSET of failed jobs waiting for their next attempt (score = next attempt time).
    public static let retry = "retry"
    /// ZSET of jobs whose retries ran out or that cannot run (score = time of death).
    public static let dead = "dead"
    /// SET of live process identities.
    public static let processes = "processes"
    /// SET of paused queue names (ours and Sidekiq Pro's; Ruby Sidekiq OSS ignores it).
    public static let paused = "paused"

    public static let orphanSweepLock = "orphan-sweep-lock"
    /// HASH `shard-maps`: shard-map digest → epoch seconds it was last written (`ShardMapCheck`).
    public static let shardMaps = "shard-maps"

    /// ZSET of batch ids by creation time; `b-BID` HASH (+ `-jids`, `-done`, `-failed`, `-died` SETs)
    /// per batch. Written by `BatchScripts` only (docs/batches.md).
    public static let batches = "batches"
    public static func batch(_ bid: String) -> String { "b-" + bid }
    /// SET `b-BID-jids`: every jid of the batch.
    public static func batchJids(_ bid: String) -> String { batch(bid) + "-jids" }
    /// SET `b-BID-done`: jids whose end is counted (the exactly-once guard).
    public static func batchDone(_ bid: String) -> String { batch(bid) + "-done" }
    /// SET `b-BID-failed`: jids that failed at least once and have not succeeded.
    public static func batchFailed(_ bid: String) -> String { batch(bid) + "-failed" }
    /// SET `b-BID-died`: jids counted as dead.
    public static func batchDied(_ bid: String) -> String { batch(bid) + "-died" }

    public static let statProcessed = "stat:processed"
    public static let statFailed = "stat:failed"

    /// LIST of one queue's jobs (LPUSH at the head, fetched from the tail).
    public static func queue(_ name: String) -> String { "queue:" + name }
    /// `SCAN` pattern of every queue list.
    public static let queuePattern = queue("*")

    /// `stat:processed:YYYY-MM-DD` (UTC day).
    public static func statProcessed(day: String) -> String { "stat:processed:" + day }
    public static func statFailed(day: String) -> String { "stat:failed:" + day }

    /// HASH of one UTC day's runs per minute: field = minute of the day (`0`…`1439`), value = runs counted in it.
    /// Written by the settle script next to the daily counters (same "counted once" rule), kept
    /// `minutelyRetention` seconds; read by `Throughput` (the dashboard's last-hour and last-day graphs).
    /// Ours: Sidekiq 6 keeps no per-minute history and ignores these keys.
    public static func statMinutelyProcessed(day: String) -> String { "stat:minutely:processed:" + day }
    public static func statMinutelyFailed(day: String) -> String { "stat:minutely:failed:" + day }
    /// Three days, so that "the last 24 hours" is always whole.
    public static let minutelyRetention = 259_200
    /// How long a UTC day's `stat:processed:…` / `stat:failed:…` counter is kept: five years, Sidekiq's own
    /// (sidekiq 6.4.1 lib/sidekiq/launcher.rb, `STATS_TTL = 5 * 365 * 24 * 60 * 60`). `Scripts.complete`'s Lua is
    /// built with it.
    public static let dailyStatRetention = 157_680_000

    /// LIST of jobs a process has fetched from `queue` and not yet acknowledged.
    public static func working(queue: String, identity: String) -> String {
        "working:queue:\(queue):\(identity)"
    }

    /// Prefix to SCAN for every in-flight list.
    public static let workingPattern = "working:queue:*"

    /// Liveness of a fetcher identity (`SET … EX ttl`, refreshed by the heartbeat).
    public static func fetcherHeartbeat(identity: String) -> String {
        // ':' to '-' byte for byte (no Foundation: the settler derives this key on every batch).
        "reliable-fetcher-heartbeat-" + String(decoding: identity.utf8.map { $0 == UInt8(ascii: ":") ? UInt8(ascii: "-") : $0 },
                                                 as: UTF8.self)
    }

    /// HASH of a process (info, busy, beat, quiet, rss, rtt_us).
    public static func process(_ identity: String) -> String { identity }
    /// HASH of a process's busy threads, where Sidekiq 6 reads them.
    public static func workers(_ identity: String) -> String { identity + ":workers" }
    /// The same HASH where Sidekiq 7 and 8 read it (`WorkSet#each`, sidekiq v7.0.0…v8.1.7 lib/sidekiq/api.rb:
    /// `hgetall("#{key}:work")`). Our heartbeat writes both; readers take whichever a process wrote.
    public static func work(_ identity: String) -> String { identity + ":work" }
    /// LIST of signals for a process (`TSTP`, `TERM`, `TTIN`).
    public static func signals(_ identity: String) -> String { identity + "-signals" }

    /// Splits a working-list key into its queue and owner identity, the way the gitlab fetcher's
    /// cleaner does (`working:(queue:.*):([^:]*:[0-9]*:[0-9a-f]*)$`); queue names may hold colons.
    /// Byte by byte (ASCII digits and lowercase hex only), without `Character`'s Unicode properties: the settler derives
    /// its heartbeat's key from its lists' keys on every batch (`ReliableQueue.acknowledge`).
    public static func parseWorking(_ key: String) -> (queue: String, identity: String)? {
        let prefix = "working:queue:".utf8
        let bytes = Array(key.utf8)
        guard bytes.starts(with: prefix) else { return nil }
        // The last three colons: host, pid and nonce follow them (a queue's name may hold colons).
        var colons: [Int] = []
        var index = bytes.count - 1
        while index >= prefix.count, colons.count < 3 {
            if bytes[index] == UInt8(ascii: ":") { colons.append(index) }
            index -= 1
        }
        guard colons.count == 3, colons[2] > prefix.count else { return nil }
        let nonce = bytes[(colons[0] + 1)...], pid = bytes[(colons[1] + 1)..<colons[0]]
        guard !nonce.isEmpty, nonce.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }),
              !pid.isEmpty, pid.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return (String(decoding: bytes[prefix.count..<colons[2]], as: UTF8.self),
                String(decoding: bytes[(colons[2] + 1)...], as: UTF8.self))
    }
}
