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
    public var used: Double
    /// concurrent: seconds until the earliest live lease expires (0 when none); window: seconds until the window ends;
    /// bucket: seconds until the bucket is full again.
    public var resetsInSeconds: Double
}

/// Reads the limiter keys (`LimitKeys`): the declarations in `limits` and each live instance key.
/// Read-only; figures are taken against Redis `TIME`.
public enum LimitAdmin {
    /// Every declared limit with each of its live instances (a declared limit with no live instance
    /// is listed once with `used` 0 and an empty key), sorted by name then key.
    public static func list(_ connection: RedisConnection) throws(RedisError) -> [LimitSummary] {
        let declared = try connection.command("HGETALL", LimitKeys.declared).strings
        var specs: [String: LimitSpec] = [:]
        for index in stride(from: 0, to: declared.count - 1, by: 2) {
            if let spec = LimitSpec(name: declared[index], encoded: declared[index + 1]) { specs[spec.name] = spec }
        }
        let time = try connection.command("TIME").strings
        guard time.count == 2, let seconds = Double(time[0]), let micros = Double(time[1]) else {
            throw .unexpectedReply("TIME returned \(time)")
        }
        let now = seconds * 1000 + (micros / 1000).rounded(.down)
        var out: [LimitSummary] = []
        for name in specs.keys.sorted() {
            let spec = specs[name]!
            let keys = try connection.scanKeys(matching: LimitKeys.instance(name: name, key: nil))
                + connection.scanKeys(matching: LimitKeys.instance(name: name, key: "*"))
            var rows: [LimitSummary] = []
            for key in Set(keys).sorted() {
                let suffix = key == LimitKeys.instance(name: name, key: nil)
                    ? "" : String(key.dropFirst(LimitKeys.instance(name: name, key: nil).count + 1))
                if let row = try summary(connection, spec: spec, key: key, suffix: suffix, now: now) { rows.append(row) }
            }
            if rows.isEmpty {
                rows.append(LimitSummary(name: name, kind: spec.kind, key: "", max: spec.max,
                                         periodSeconds: Double(spec.milliseconds) / 1000, used: 0, resetsInSeconds: 0))
            }
            out += rows
        }
        return out
    }

    private static func summary(_ connection: RedisConnection, spec: LimitSpec, key: String, suffix: String,
                                now: Double) throws(RedisError) -> LimitSummary? {
        let period = Double(spec.milliseconds)
        var row = LimitSummary(name: spec.name, kind: spec.kind, key: suffix, max: spec.max, periodSeconds: period / 1000,
                               used: 0, resetsInSeconds: 0)
        switch spec.kind {
        case .concurrent:
            let scores = try connection.command("ZRANGEBYSCORE", key, now, "+inf", "WITHSCORES").strings
            let expiries = stride(from: 1, to: scores.count, by: 2).compactMap { Double(scores[$0]) }
            row.used = Double(expiries.count)
            row.resetsInSeconds = expiries.min().map { max(0, $0 - now) / 1000 } ?? 0
        case .window:
            let fields = try connection.command("HMGET", key, "window", "count").array ?? []
            guard fields.count == 2, let window = fields[0].string.flatMap(Double.init) else { return nil }
            let current = (now / period).rounded(.down)
            row.used = window == current ? fields[1].string.flatMap(Double.init) ?? 0 : 0
            row.resetsInSeconds = ((current + 1) * period - now) / 1000
        case .bucket:
            let fields = try connection.command("HMGET", key, "tokens", "at").array ?? []
            guard fields.count == 2, let tokens = fields[0].string.flatMap(Double.init),
                  let at = fields[1].string.flatMap(Double.init) else { return nil }
            let left = min(Double(spec.max), tokens + max(0, now - at) * Double(spec.max) / period)
            row.used = Double(spec.max) - left
            row.resetsInSeconds = (Double(spec.max) - left) * period / Double(spec.max) / 1000
        }
        return row
    }
}
