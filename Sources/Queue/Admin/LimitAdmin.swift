import Foundation

/// One limiter instance as `workerctl limits ls` shows it.
public struct LimitSummary: Sendable, Equatable {
    public var name: String
    public var kind: LimitSpec.Kind
    /// The key derived from the job's arguments; empty for a global limiter.
    public var key: String
    public var max: Int
    /// Lease (concurrent), window length (window) or refill period (bucket), in seconds.
    public var periodSeconds: Double
    /// concurrent: live leases; window: admissions in the current window; bucket: tokens taken (max - tokens left).
    /// Always finite, in `0...Bounded.maxCounter`: a value in Redis outside it is clamped and named in `invalid`.
    public var used: Double
    /// concurrent: seconds until the earliest live lease expires (0 when none); window: seconds until the window ends;
    /// bucket: seconds until the bucket is full again.
    public var resetsInSeconds: Double
    /// Set when the instance's hash (or the declaration) holds a value that is not a number in its range (anyone with
    /// Redis access can write `count 1e300`, `tokens nan`): what it holds, for the operator; `used` is then clamped.
    public var invalid: String? = nil
}

/// Reads the limiter keys (`LimitKeys`): the declarations in `limits` and each live instance key.
/// Read-only; figures are taken against Redis `TIME`.
public enum LimitAdmin {
    /// How many keys of the keyspace one listing looks at by default (`SCAN limit:*`: 10 steps of 1,000).
    public static let scannedKeys = 10_000
    /// The most instances one listing reads (one command each); past it the listing is partial.
    public static let maxInstances = 200

    /// Every declared limit with each of its live instances (a declared limit with no live instance
    /// is listed once with `used` 0 and an empty key), sorted by name then key.
    ///
    /// Bounded whatever the keyspace holds (review M5: one whole-keyspace `SCAN` per limit held Redis for seconds
    /// with 1,000,000 keys): one `SCAN limit:* COUNT …` walk within `budget` (each step costs its `COUNT`), at most
    /// `maxInstances` instances read (a global limiter's instance is always read, by name). When either stops it,
    /// `budget.exhausted` is set: per-key instances may be missing and the reader says "partial".
    public static func list(_ connection: RedisConnection,
                            budget: ScanBudget = ScanBudget(maxEntries: scannedKeys)) throws(RedisError) -> [LimitSummary] {
        let declared = try connection.command("HGETALL", LimitKeys.declared).strings
        var specs: [String: LimitSpec] = [:]
        for index in stride(from: 0, to: declared.count - 1, by: 2) {
            if let spec = LimitSpec(name: declared[index], encoded: declared[index + 1]) { specs[spec.name] = spec }
        }
        if specs.isEmpty { return [] }
        let time = try connection.command("TIME").strings
        guard time.count == 2, let seconds = Double(time[0]), let micros = Double(time[1]) else {
            throw .unexpectedReply("TIME returned \(time)")
        }
        let now = seconds * 1000 + (micros / 1000).rounded(.down)
        // A global limiter's one instance (`limit:NAME`) is read by name, whatever the scan finds; each key the scan
        // finds goes to the longest declared name it is an instance of (`limit:NAME:KEY`).
        let prefix = LimitKeys.instance(name: "", key: nil)
        var instances: [String: [String]] = [:]
        let names = specs.keys.sorted()
        let globals = try connection.pipeline(names.map { ["EXISTS", LimitKeys.instance(name: $0, key: nil)] })
        for (name, exists) in zip(names, globals) where exists.integer == 1 {
            instances[name] = [LimitKeys.instance(name: name, key: nil)]
        }
        for key in try budget.keys(matching: prefix + "*", connection).sorted() {
            let rest = key.dropFirst(prefix.count)
            let owner = specs.keys.filter { rest == $0 || rest.hasPrefix($0 + ":") }.max { $0.count < $1.count }
            if let owner, key != LimitKeys.instance(name: owner, key: nil) { instances[owner, default: []].append(key) }
        }
        var read = 0
        var out: [LimitSummary] = []
        for (name, spec) in specs.sorted(by: { $0.key < $1.key }) {
            var rows: [LimitSummary] = []
            for key in instances[name] ?? [] {
                if read >= maxInstances { budget.stop(); break }
                read += 1
                let suffix = key == LimitKeys.instance(name: name, key: nil)
                    ? "" : String(key.dropFirst(LimitKeys.instance(name: name, key: nil).count + 1))
                do {
                    if let row = try summary(connection, spec: spec, key: key, suffix: suffix, now: now) { rows.append(row) }
                } catch .server(let message) where message.hasPrefix("WRONGTYPE") {
                    // Anyone may have written a list or a string at an instance key: that row is invalid, not the listing.
                    rows.append(LimitSummary(name: name, kind: spec.kind, key: suffix, max: spec.max,
                                             periodSeconds: Double(spec.milliseconds) / 1000, used: 0, resetsInSeconds: 0,
                                             invalid: "the key is not of the type a \(spec.kind.rawValue) limiter writes"))
                }
            }
            if rows.isEmpty {
                rows.append(LimitSummary(name: name, kind: spec.kind, key: "", max: spec.max,
                                         periodSeconds: Double(spec.milliseconds) / 1000, used: 0, resetsInSeconds: 0))
            }
            out += rows
        }
        return out
    }

    /// The largest figure shown for `used`: a count above it (or not a number) is clamped and marked invalid.
    static let maxUsed = Double(Bounded.maxCounter)
    /// Milliseconds of Redis time (`TIME`): a limiter's `at` or expiry outside 0…year 9999 is not a time.
    static let maxMilliseconds = Bounded.maxEpochSeconds * 1000

    /// One instance's figures, every number from Redis read through `Bounded.number` (M2 of review 3: `count 1e300`
    /// used to reach `Int(_:)` in `limits ls`, `jobs explain` and the job page): nothing here can be NaN or infinite.
    private static func summary(_ connection: RedisConnection, spec: LimitSpec, key: String, suffix: String,
                                now: Double) throws(RedisError) -> LimitSummary? {
        guard spec.milliseconds > 0, spec.max >= 0, spec.max <= Bounded.maxCounter else {
            return LimitSummary(name: spec.name, kind: spec.kind, key: suffix, max: Bounded.int(spec.max, in: 0...Bounded.maxCounter),
                                periodSeconds: 0, used: 0, resetsInSeconds: 0,
                                invalid: "declared as max \(spec.max) per \(spec.milliseconds) ms")
        }
        let period = Double(spec.milliseconds)
        let max = Double(spec.max)
        var row = LimitSummary(name: spec.name, kind: spec.kind, key: suffix, max: spec.max, periodSeconds: period / 1000,
                               used: 0, resetsInSeconds: 0)
        func shown(_ text: String?) -> String { text.map { String($0.prefix(32)) } ?? "nil" }
        switch spec.kind {
        case .concurrent:
            let scores = try connection.command("ZRANGEBYSCORE", key, now, "+inf", "WITHSCORES").strings
            let texts = stride(from: 1, to: scores.count, by: 2).map { scores[$0] }
            let expiries = texts.map { Bounded.number($0, in: 0...maxMilliseconds) }
            row.used = Swift.min(Double(expiries.count), maxUsed)
            if let bad = zip(texts, expiries).first(where: { $0.1 == nil }) {
                row.invalid = "a lease expiry is not a time: \(shown(bad.0))"
            }
            row.resetsInSeconds = expiries.compactMap { $0 }.min().map { Swift.max(0, $0 - now) / 1000 } ?? 0
        case .window:
            let fields = try connection.command("HMGET", key, "window", "count").array ?? []
            guard fields.count == 2, let windowText = fields[0].string else { return nil }
            let current = (now / period).rounded(.down)
            guard let window = Bounded.number(windowText, in: 0...maxMilliseconds) else {
                row.invalid = "window \(shown(windowText)) is not a window index"
                return row
            }
            row.resetsInSeconds = ((current + 1) * period - now) / 1000
            guard window == current else { return row }
            let countText = fields[1].string
            if let count = Bounded.number(countText ?? "0", in: 0...maxUsed) {
                row.used = count
            } else {
                row.invalid = "count \(shown(countText)) is not a count in 0...\(Bounded.maxCounter)"
                row.used = clampedUsed(countText)
            }
        case .bucket:
            let fields = try connection.command("HMGET", key, "tokens", "at").array ?? []
            guard fields.count == 2, let tokensText = fields[0].string, let atText = fields[1].string else { return nil }
            guard let tokens = Bounded.number(tokensText, in: -maxUsed...maxUsed) else {
                row.invalid = "tokens \(shown(tokensText)) is not a number of tokens"
                row.used = Swift.min(Swift.max(0, max - clampedUsed(tokensText, lower: -maxUsed)), maxUsed)
                return row
            }
            guard let at = Bounded.number(atText, in: 0...maxMilliseconds) else {
                row.invalid = "at \(shown(atText)) is not a time"
                return row
            }
            let left = Swift.min(max, tokens + Swift.max(0, now - at) * max / period)
            row.used = Swift.min(Swift.max(max - left, 0), maxUsed)
            row.resetsInSeconds = Bounded.seconds((max - left) * period / Swift.max(max, 1) / 1000, max: Bounded.maxIntervalSeconds)
        }
        return row
    }

    /// A figure Redis holds that is not in range, clamped into `lower...maxUsed` for display (NaN and text give `lower`).
    private static func clampedUsed(_ text: String?, lower: Double = 0) -> Double {
        guard let value = text.flatMap({ Double($0.prefix(64)) }), !value.isNaN else { return Swift.max(lower, 0) }
        return Swift.min(Swift.max(value, lower), maxUsed)
    }
}
