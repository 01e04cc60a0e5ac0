import Foundation
import WorkersQueue
import WorkersScheduler

/// The names one state fuzzer iteration is built around — the parts the readers will actually look at: queue names
/// that are in `queues`, jids that are in the sets, identities in `processes`, limiter names in the declared hash, …
/// — drawn from the iteration's generator. Immutable once drawn; the test thread only.
struct FuzzState: Sendable {
    let now: Double
    let queues: [String]
    /// Queue names the worker children serve (plain, so that the CLI takes them as arguments).
    let plainQueues: [String]
    /// `HOST:PID:NONCE`: the first one's fetcher heartbeat is live, the others are dead (their jobs are orphans).
    let identities: [String]
    let jids: [String]
    let bids: [String]
    let limiters: [String]
    let limiterKeys: [String]
    let cronNames: [String]
    let digests: [String]
    let tokens: [String]
    let days: [String]
    let classes: [String]
    let minute: ClassMetricsLayout.Minute

    init(_ r: inout SplitMix64, now: Double) {
        self.now = now
        let plain = ["default", "fq" + r.hex(6)]
        plainQueues = plain
        queues = plain + [r.pick(["evil\u{202E}q", "a:b", "\u{1B}[31mq", "q\u{85}", "-dash"])]
        identities = (0..<3).map { _ in "fuzzhost:\(1000 + r.below(60000)):\(r.hex(12))" }
        jids = (0..<6).map { _ in r.hex(24) } + [r.pick(["../../x", "\u{202E}jid", "j\u{1B}[2J", String(repeating: "j", count: 300)])]
        bids = [r.hex(16), r.hex(16), r.pick(["b\u{202E}", "b:c"])]
        // A bench class with a limiter (registered by `--bench-jobs`), so that admission meets the hostile limiter
        // state; its limiter is one of the state's.
        let (limitedClass, limiter) = r.pick([("LimitProbeConcurrent", "probe-concurrent"), ("LimitProbeMutex", "probe-mutex"),
                                              ("LimitProbeWindow", "probe-window"), ("LimitProbeBucket", "probe-bucket")])
        limiters = [limiter, "lim" + r.hex(4), r.pick(["evil\u{1B}lim", "lim:with:colons", "\u{202E}lim"])]
        limiterKeys = ["user-1", r.pick(["\u{0}", "k\u{202E}", "k:k"])]
        cronNames = ["cron_" + r.hex(6), "nightly.report", r.pick(["\u{202E}cron", "cron\u{1B}[31m", "c:d"])]
        digests = [r.hex(64), r.hex(64)]
        tokens = [r.hex(24)]
        let day = { (offset: Double) -> String in
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "UTC")
            formatter.dateFormat = "yyyy-MM-dd"
            return formatter.string(from: Date(timeIntervalSince1970: now + offset))
        }
        days = [day(0), day(-86_400)]
        classes = ["SteerProbe", limitedClass, r.pick(["HardJob", "BatchProbe"]), r.pick(["\u{202E}Evil", "Evil\u{1B}[1m", "A::B"])]
        minute = ClassMetricsLayout.Minute(epochSeconds: now)
    }

    /// The values a key pattern's part takes: by the part's name, qualified by the pattern's owner where two
    /// features use one name (`name`: a limiter's or a cron entry's). Nil: no generator (the test fails).
    func values(for part: KeyPattern.Part, of pattern: KeyPattern) -> [String]? {
        switch (pattern.owner, part.name) {
        case ("limiters", "name"): return limiters
        case ("cron", "name"): return cronNames
        case (_, "queue"): return queues
        case (_, "identity"): return identities
        case (_, "identity with - for :"): return identities.map { $0.replacingOccurrences(of: ":", with: "-") }
        case (_, "day"): return days
        case (_, "bid"): return bids
        case (_, "digest"): return digests
        case (_, "jid"): return jids
        case (_, "token"): return tokens
        case (_, "key"): return limiterKeys
        case (_, "bucket"): return [minute.minute, minute.tenMinutes]
        case (_, "class"): return classes
        case (_, "window"): return [minute.histogramWindow]
        case ("geo jobs", "provider"): return ["nominatim", "photon"]
        case ("geo jobs", "language"): return ["en", "\u{202E}"]
        case ("geo jobs", "zoom"): return ["14", "99999999999999999999"]
        case ("geo jobs", "decimals"): return ["3"]
        case ("geo jobs", "cell"): return ["48.857,2.352", "1e300,-1e300"]
        case ("bench jobs", "limit"): return ["probe"]
        default: return nil
        }
    }
}

/// Writes one key's random content for each key pattern; `generators` holds one per pattern name (the test fails on
/// a catalogue pattern without one, or a generator without a pattern).
enum StateGenerators {
    typealias Generator = @Sendable (inout SplitMix64, FuzzState, KeyPattern.RedisType) -> FuzzContent

    /// Hostile content of `type`: scalars, job payloads, fields of hostile names.
    static func generic(_ r: inout SplitMix64, _ s: FuzzState, _ type: KeyPattern.RedisType) -> FuzzContent {
        func some(_ body: (inout SplitMix64) -> [UInt8]) -> [[UInt8]] { (0..<(1 + r.below(4))).map { _ in body(&r) } }
        func item(_ r: inout SplitMix64) -> [UInt8] {
            r.chance(0.4) ? job(&r, s) : HostileValues.scalar(&r)
        }
        switch type {
        case .string: return .string(item(&r))
        case .list: return .list(some(item))
        case .set: return .set(some(item))
        case .zset: return .zset(some(item).map { (HostileValues.score(&r, now: s.now), $0) })
        case .hash: return .hash(some(item).map { (HostileValues.scalar(&r), $0) })
        }
    }

    static let scalar: Generator = { r, s, type in generic(&r, s, type) }

    /// A job payload of one of the state's jids, queues and classes.
    static func job(_ r: inout SplitMix64, _ s: FuzzState) -> [UInt8] {
        let jid = r.pick(s.jids), queue = r.pick(s.queues), className = r.pick(s.classes)
        let bid = r.chance(0.3) ? r.pick(s.bids) : nil
        return HostileValues.job(&r, jid: jid, queue: queue, className: className, bid: bid)
    }

    /// Members drawn from the state (`pool`) and a few hostile ones: a set, sorted set or list of names; a hash whose
    /// fields are the names; other types generic.
    static func members(_ pool: @escaping @Sendable (FuzzState) -> [String]) -> Generator {
        { r, s, type in
            var items = pool(s).filter { _ in r.chance(0.85) }.map { Array($0.utf8) }
            for _ in 0..<r.below(3) { items.append(HostileValues.scalar(&r)) }
            if items.isEmpty { items = [HostileValues.scalar(&r)] }
            switch type {
            case .set: return .set(items)
            case .list: return .list(items)
            case .zset: return .zset(items.map { (HostileValues.score(&r, now: s.now), $0) })
            case .hash: return .hash(items.map { ($0, HostileValues.scalar(&r)) })
            case .string: return generic(&r, s, type)
            }
        }
    }

    /// Job payloads (valid-looking, with hostile fields) for the state's jids and queues.
    static let jobs: Generator = { r, s, type in
        func some(_ r: inout SplitMix64) -> [[UInt8]] {
            (0..<(1 + r.below(5))).map { _ in job(&r, s) }
        }
        switch type {
        case .list: return .list(some(&r))
        case .zset: return .zset(some(&r).map { (HostileValues.score(&r, now: s.now), $0) })
        case .set: return .set(some(&r))
        case .string, .hash: return generic(&r, s, type)
        }
    }

    /// A hash with the fields its readers look at (`fields`), each holding a hostile value (or one of `values`);
    /// other types generic.
    static func fields(_ names: @escaping @Sendable (FuzzState) -> [String], values: [String] = []) -> Generator {
        { r, s, type in
            guard type == .hash else { return generic(&r, s, type) }
            var pairs: [([UInt8], [UInt8])] = []
            for name in names(s) where r.chance(0.8) {
                let value = !values.isEmpty && r.chance(0.3) ? Array(r.pick(values).utf8) : HostileValues.scalar(&r)
                pairs.append((Array(name.utf8), value))
            }
            if r.chance(0.3) { pairs.append((HostileValues.scalar(&r), HostileValues.scalar(&r))) }
            return .hash(pairs.isEmpty ? [(Array("x".utf8), HostileValues.scalar(&r))] : pairs)
        }
    }

    /// A JSON object with `keys`, each a hostile JSON value, as text.
    static func object(_ r: inout SplitMix64, _ keys: [String]) -> String {
        "{" + keys.filter { _ in r.chance(0.8) }.map { JSONValue.string($0).serialized() + ":" + r.pick(HostileValues.jsonValues) }
            .joined(separator: ",") + "}"
    }

    /// One entry per key pattern of `KeyCatalogue.all`, by name.
    static let generators: [String: Generator] = [
        "queues": members(\.queues),
        "queue": jobs,
        "paused": members { Array($0.queues.dropFirst()) },
        "working": jobs,
        "fetcher-heartbeat": scalar,
        "processes": members(\.identities),
        "process": { r, s, type in
            let info = r.chance(0.7)
                ? object(&r, ["hostname", "pid", "tag", "concurrency", "queues", "labels", "started_at", "identity",
                              "version", "weights", "capsules", "classes", "mode"]) : "x"
            return fields({ _ in ["info", "busy", "beat", "quiet", "rss", "rtt_us", "concurrency"] },
                          values: [info, "\(s.now)", "true", "false"])(&r, s, type)
        },
        "process-workers": work,
        "process-work": work,
        "process-signals": { r, s, type in
            type == .list ? .list((0..<(1 + r.below(3))).map { _ in Array(r.pick(["TSTP", "TERM", "USR1", "TTIN", "\u{1B}[2J"]).utf8) })
                : generic(&r, s, type)
        },
        "orphan-sweep-lock": scalar,
        "schedule": jobs, "retry": jobs, "dead": jobs,
        "stat-processed": scalar, "stat-failed": scalar, "stat-processed-day": scalar, "stat-failed-day": scalar,
        "stat-minutely-processed": fields { s in ["0", "1439", "1440", "-1", "\(Int(s.now) / 60 % 1440)"] },
        "stat-minutely-failed": fields { s in ["0", "1439", "1440", "-1", "\(Int(s.now) / 60 % 1440)"] },
        "batches": members(\.bids),
        "batch": fields({ _ in ["total", "pending", "dead", "created_at", "description", "complete_at", "success_at",
                                "cb_complete_head", "cb_success_head", "failures", "callback_queue"] }),
        "batch-jids": members(\.jids), "batch-done": members(\.jids), "batch-failed": members(\.jids),
        "batch-died": members(\.jids),
        "unique-lock": { r, s, type in type == .string && r.chance(0.5) ? .string(Array(r.pick(s.jids).utf8)) : generic(&r, s, type) },
        "unique-owner": { r, s, type in
            fields({ _ in ["class", "queue", "until", "for", "lock"] },
                   values: s.digests.map { Keys.uniqueLock($0) } + s.queues + s.classes)(&r, s, type)
        },
        "unique-dropped": scalar,
        "unique-purge": jobs,
        "limits": { r, s, type in
            guard type == .hash else { return generic(&r, s, type) }
            return .hash(s.limiters.map { name in
                // Mostly a declaration a worker writes (so that the instance's hostile figures are read), else hostile.
                let spec = r.chance(0.7) ? "\(r.pick(["window", "bucket", "concurrent"])) 10 60000"
                    : r.chance(0.6) ? "\(r.pick(["window", "bucket", "concurrent"])) \(r.pick(["10", "0", "-1", "9223372036854775807", "1e300"])) \(r.pick(["60000", "0", "-5", "1e300"]))"
                    : String(decoding: HostileValues.scalar(&r), as: UTF8.self)
                return (Array(name.utf8), Array(spec.utf8))
            })
        },
        "limit": limiterInstance, "limit-keyed": limiterInstance,
        "progress": { r, s, type in
            type == .string && r.chance(0.7) ? .string(Array(object(&r, ["fraction", "note", "at"]).utf8)) : generic(&r, s, type)
        },
        "cancels": { r, s, type in
            guard type == .zset else { return generic(&r, s, type) }
            var items = s.jids.map { (r.pick(["inf", "\(Int(s.now) + 86_400)", "-inf", "1e300", "\(Int(s.now) - 10)"]), Array($0.utf8)) }
            // Past the 10,000 live marks a capped reader would stop at (review M3).
            if r.chance(0.5) { items += (0..<(10_001 + r.below(500))).map { _ in ("\(Int(s.now) + 86_400)", Array(r.hex(24).utf8)) } }
            return .zset(items)
        },
        "cancel-mark": scalar,
        "completion": { r, s, type in
            type == .string && r.chance(0.7)
                ? .string(Array(object(&r, ["state", "class", "queue", "finished_at", "attempts"]).utf8)) : generic(&r, s, type)
        },
        "class-metrics-counters": fields { s in s.classes.flatMap { [ClassMetricsLayout.runsField($0), ClassMetricsLayout.failedField($0),
                                                                      ClassMetricsLayout.millisecondsField($0)] } },
        "class-metrics-sidekiq-histogram": scalar,
        "class-metrics-histogram": scalar,
        "shard-maps": members { _ in ["0123456789abcdef", "x"] },
        "subject-keys-erased": scalar,
        "subject-keys-erasures": members(\.digests),
        "geo-provider-blocked": scalar, "geo-provider-probe": scalar, "geocode-answer": scalar,
        "cron-jobs": members { s in s.cronNames.map { CronKeys.job($0) } },
        "cron-job": { r, s, type in
            fields({ _ in [CronHashField.name, CronHashField.klass, CronHashField.cron, CronHashField.description,
                           CronHashField.args, CronHashField.dateAsArgument, CronHashField.message, CronHashField.status,
                           CronHashField.activeJob, CronHashField.queueNamePrefix, CronHashField.queueNameDelimiter,
                           CronHashField.lastEnqueueTime, CronHashField.symbolizeArgs, CronHashField.queue,
                           CronHashField.timezone, CronHashField.catchUp, CronHashField.passTick, CronHashField.lastTick] },
                   values: ["* * * * *", "enabled", "disabled", "SteerProbe", "Europe/Berlin", "Nowhere/Atlantis",
                            "61 25 * * *", "*/0 * * * *", "2026-12-07T00:00:00Z", "9999-12-31T23:59:59Z",
                            "all within 7d", "date_minus_9999999999"] + s.queues)(&r, s, type)
        },
        "cron-job-enqueued": { r, s, type in
            type == .zset ? .zset((0..<(1 + r.below(4))).map { _ in
                (HostileValues.score(&r, now: s.now), r.chance(0.5) ? Array(r.pick(["2026-12-07T00:00:00Z", "\(Int(s.now))"]).utf8) : HostileValues.scalar(&r))
            }) : generic(&r, s, type)
        },
        "cron-job-jid-history": { r, s, type in
            type == .list ? .list((0..<(1 + r.below(4))).map { _ in Array(object(&r, ["jid", "enqueued", "tick", "manual"]).utf8) })
                : generic(&r, s, type)
        },
        "probe-limit-running": scalar, "probe-limit-max": scalar, "probe-limit-done": scalar,
        "probe-limit-windows": scalar, "probe-limit-bucket": scalar,
        "probe-steer-runs": scalar, "probe-steer-done": scalar,
    ]

    /// A busy thread's entry: thread id → `{"queue":…,"payload":…,"run_at":…}` with hostile values.
    static let work: Generator = { r, s, type in
        guard type == .hash else { return generic(&r, s, type) }
        return .hash((0..<(1 + r.below(3))).map { _ in
            let payload = String(decoding: job(&r, s), as: UTF8.self)
            let value = r.chance(0.8)
                ? #"{"queue":\#(r.pick(HostileValues.jsonValues + [JSONValue.string(r.pick(s.queues)).serialized()])),"payload":\#(r.chance(0.7) ? JSONValue.string(payload).serialized() : r.pick(HostileValues.jsonValues)),"run_at":\#(r.pick(HostileValues.jsonValues))}"#
                : String(decoding: HostileValues.scalar(&r), as: UTF8.self)
            return (Array(r.pick(["tid-1", "tid-2", "\u{1B}", ""]).utf8), Array(value.utf8))
        })
    }

    /// A limiter instance: a concurrent limiter's leases (ZSET token → expiry) or a window/bucket limiter's HASH.
    static let limiterInstance: Generator = { r, s, type in
        switch type {
        case .zset: return .zset((0..<(1 + r.below(3))).map { _ in (HostileValues.score(&r, now: s.now), Array(r.hex(24).utf8)) })
        case .hash:
            // A valid-looking record (the current window of a 60 s limiter, a refill time of now) with hostile
            // figures, or hostile fields throughout.
            guard r.chance(0.7) else { return fields({ _ in ["window", "count", "tokens", "at"] })(&r, s, type) }
            let nowMs = Int(s.now * 1000)
            let figure = { (r: inout SplitMix64, valid: String) in r.chance(0.7) ? HostileValues.scalar(&r) : Array(valid.utf8) }
            return .hash([(Array("window".utf8), r.chance(0.8) ? Array("\(nowMs / 60_000)".utf8) : HostileValues.scalar(&r)),
                          (Array("count".utf8), figure(&r, "3")), (Array("tokens".utf8), figure(&r, "3")),
                          (Array("at".utf8), r.chance(0.8) ? Array("\(nowMs)".utf8) : HostileValues.scalar(&r))])
        default: return generic(&r, s, type)
        }
    }
}
