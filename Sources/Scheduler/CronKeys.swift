import Foundation
import WorkersQueue

/// sidekiq-cron 1.8.0's key layout (`shared/docs/sidekiq-wire-format.md` §12.1), which this
/// scheduler writes so that sidekiq-cron's tools (web UI, `Sidekiq::Cron::Job.all`) see the entries.
public enum CronKeys {
    /// SET whose members are the full hash keys `cron_job:NAME` (not bare names).
    public static let jobs = "cron_jobs"

    /// HASH of one entry: sidekiq-cron's fields plus ours (see `CronHashField`).
    public static func job(_ name: String) -> String { "cron_job:" + name }

    /// Whether an operator may name an entry so (`workerctl cron`, the web dashboard): non-empty, no whitespace.
    /// Entries written by other tools may use any other character, so nothing else is refused.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.contains(where: { $0.isWhitespace || $0.isNewline })
    }

    /// ZSET of claimed ticks: member = tick as ISO-8601 UTC, score = the tick's epoch seconds.
    /// A successful `ZADD NX` is the cross-process claim (sidekiq-cron's own lock).
    public static func enqueued(_ name: String) -> String { "cron_job:\(name):enqueued" }

    /// LIST of recent fires, newest first: JSON `{"jid","enqueued",…}`.
    public static func jidHistory(_ name: String) -> String { "cron_job:\(name):jid_history" }

    /// Every key pattern of the scheduler (`QueueKeyCatalogue` is Queue's; the union: Tests/JobsTests/KeyCatalogue+All).
    package static let catalogue: [KeyPattern] = {
        let name = [KeyPattern.Part("name", sample: "nightly-report")]
        return [
            KeyPattern("cron-jobs", .set, owner: "cron", key: jobs),
            KeyPattern("cron-job", [.hash], owner: "cron", parts: name) { job($0[0]) },
            KeyPattern("cron-job-enqueued", [.zset], owner: "cron", parts: name) { enqueued($0[0]) },
            KeyPattern("cron-job-jid-history", [.list], owner: "cron", parts: name) { jidHistory($0[0]) },
        ]
    }()

    /// The entry name of a `cron_jobs` member (`cron_job:NAME` ⇒ `NAME`), nil for anything else.
    public static func name(fromJobKey key: String) -> String? {
        let prefix = "cron_job:"
        guard key.hasPrefix(prefix), key.count > prefix.count else { return nil }
        return String(key.dropFirst(prefix.count))
    }
}

/// Field names of the `cron_job:NAME` hash.
///
/// sidekiq-cron's own fields are written on every sync so that its `Job.all` can load the entry;
/// the fields marked *ours* are ignored by sidekiq-cron.
public enum CronHashField {
    // sidekiq-cron 1.8.0
    public static let name = "name"
    public static let klass = "klass"
    public static let cron = "cron"
    public static let description = "description"
    public static let args = "args"
    public static let dateAsArgument = "date_as_argument"
    public static let message = "message"
    public static let status = "status"
    public static let activeJob = "active_job"
    public static let queueNamePrefix = "queue_name_prefix"
    public static let queueNameDelimiter = "queue_name_delimiter"
    public static let lastEnqueueTime = "last_enqueue_time"
    public static let symbolizeArgs = "symbolize_args"

    // ours
    /// The queue (sidekiq-cron keeps it only inside `message`).
    public static let queue = "queue"
    /// The IANA time zone of the cron expression.
    public static let timezone = "timezone"
    /// The catch-up policy as text (`all within 7d`), for display.
    public static let catchUp = "catch_up"
    /// `pass_tick` as written in the schedule file.
    public static let passTick = "pass_tick"
    /// The most recent tick fired (or seen fired by another scheduler), ISO-8601 UTC.
    public static let lastTick = "last_tick"
    /// The same as epoch seconds: the persisted catch-up cursor. Only moves forward.
    public static let lastTickEpoch = "last_tick_epoch"
    /// Epoch seconds of the last `cron enable` (ticks before it are never caught up).
    public static let enabledAtEpoch = "enabled_at_epoch"
    /// `swift-scheduler` for entries this scheduler created from a schedule file.
    public static let source = "source"

    public static let sourceValue = "swift-scheduler"
}

/// `status` values, as sidekiq-cron writes them.
public enum CronStatus: String, Sendable {
    case enabled, disabled
}

/// Text forms used in the hash and history.
enum CronTimeText {
    /// sidekiq-cron's `last_enqueue_time` / history `enqueued`: `2026-11-22 07:01:05 +0000`.
    static func enqueueTime(_ epoch: Double) -> String {
        WallTime(wallSeconds: Int(epoch.rounded(.down))).description + " +0000"
    }
}

/// Job ids derived from an entry and a tick, so that the same tick always gets the same jid (a
/// duplicate, were one ever enqueued, would be recognised by the job ledger, which keys on jid).
public enum CronJobID {
    /// 24 lowercase hex characters (Sidekiq's jid shape) from two independent 64-bit FNV-1a hashes
    /// of `"NAME\u{0}TICK"`. Not cryptographic: an identifier, not a secret.
    public static func jid(entry name: String, tick: Date) -> String {
        let bytes = Array((name + "\u{0}" + TickFormat.iso8601UTC(tick)).utf8)
        func fnv(_ basis: UInt64) -> UInt64 {
            var hash = basis
            for byte in bytes {
                hash ^= UInt64(byte)
                hash = hash &* 0x0000_0100_0000_01B3
            }
            // Final avalanche (splitmix64's finaliser) so that near-identical inputs differ widely.
            hash ^= hash >> 30; hash = hash &* 0xBF58_476D_1CE4_E5B9
            hash ^= hash >> 27; hash = hash &* 0x94D0_49BB_1331_11EB
            hash ^= hash >> 31
            return hash
        }
        let high = fnv(0xCBF2_9CE4_8422_2325), low = fnv(0x6C62_272E_07BB_0142)
        let hex = String(high, radix: 16).leftPadded(16) + String(low, radix: 16).leftPadded(16)
        return String(hex.prefix(24))
    }
}

private extension String {
    func leftPadded(_ width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
