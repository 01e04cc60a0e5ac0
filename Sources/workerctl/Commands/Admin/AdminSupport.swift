import ArgumentParser
import Foundation
import WorkersQueue
import WorkersScheduler

/// Where the operator commands connect: `--redis-url`, else `$REDIS_URL`, else the `redis_url`
/// of `--config FILE`, else the local default (the same order as `workerctl worker`).
struct ConnectionOptions: ParsableArguments {
    @OptionGroup var redis: RedisOptions

    @Option(name: .long, help: "YAML config file whose redis_url to use (see config/workers.yaml).")
    var config: String?

    /// Opens the connection. Unreachable Redis ⇒ `CLIError.runtime("cannot connect to Redis at
    /// host:port/db: reason")` (exit 1); a bad URL or config file ⇒ usage error (exit 2).
    func connect() throws -> RedisConnection {
        let url = try resolvedURL()
        let endpoint: RedisEndpoint
        do { endpoint = try RedisEndpoint(url: url).warned() } catch { throw CLIError.usage(error.description) }
        do { return try RedisConnection(endpoint: endpoint) } catch { throw CLIError.runtime(error.description) }
    }

    /// The URL to use; an empty `REDIS_URL` counts as unset.
    func resolvedURL() throws -> String {
        let configured = try config.map { try WorkerConfigFile.load(path: $0).redisURL } ?? nil
        let environment = ProcessInfo.processInfo.environment["REDIS_URL"].flatMap { $0.isEmpty ? nil : $0 }
        return redis.redisURL ?? environment ?? configured ?? RedisEndpoint.defaultURL
    }

    /// Every shard (docs/sharding.md): the default one is `resolvedURL()`, the others from
    /// `REDIS_SHARDS` / `QUEUE_SHARDS` or the config file's `redis_shards` / `queue_shards`.
    func shardMap() throws -> ShardMap {
        let url = try resolvedURL()
        let file = try config.map { try WorkerConfigFile.load(path: $0) } ?? WorkerConfigFile()
        if let map = try file.shardMap(defaultURL: url) { return map }
        do { return ShardMap(single: try RedisEndpoint(url: url).warned()) } catch { throw CLIError.usage(error.description) }
    }

    /// A connection to one shard of `map`.
    func connect(shard: ShardMap.Shard) throws -> RedisConnection {
        do { return try RedisConnection(endpoint: shard.endpoint) } catch { throw CLIError.runtime("shard \(shard.name): \(error)") }
    }

    /// A connection to the shard holding `queue` (the only Redis without sharding).
    func connect(queue: String) throws -> RedisConnection {
        let map = try shardMap()
        if map.isSingle { return try connect() }
        return try connect(shard: map.shard(forQueue: queue))
    }

    /// Runs `body` on every shard, in the map's order (the default shard first), each with its own
    /// connection; with one Redis, `body` on it alone (so more than one result ⇔ several shards, the
    /// case where list commands add a SHARD column and a `"shard"` JSON field). Stops at the first error.
    func onEveryShard<T>(_ body: (RedisConnection) throws -> T) throws -> [OnShard<T>] {
        let map = try shardMap()
        if map.isSingle { return [OnShard(shard: ShardMap.defaultName, value: try body(try connect()))] }
        return try map.shards.map { shard in OnShard(shard: shard.name, value: try body(try connect(shard: shard))) }
    }

    /// Runs `body` on each shard in turn and returns the first answer that is not a miss: a jid,
    /// process identity, unique lock, batch or cron entry lives on one shard. A miss is an
    /// `AdminError` whose `isNotFound` is true, or `CronStoreError.notFound`; any other error stops
    /// the search. A body that writes does so only on the shard that holds the item (it missed on the
    /// shards before). No shard holds it ⇒ the last shard's miss. With one Redis, `body` on it.
    func onShardHolding<T>(_ body: (RedisConnection) throws -> T) throws -> T {
        let map = try shardMap()
        if map.isSingle { return try body(try connect()) }
        var lastMiss: (any Error)?
        for shard in map.shards {
            do { return try body(try connect(shard: shard)) } catch let error as AdminError where error.isNotFound {
                lastMiss = error
            } catch CronStoreError.notFound(let name) {
                lastMiss = CronStoreError.notFound(name)
            }
        }
        throw lastMiss ?? AdminError.invalidArgument("no shard configured")
    }
}

/// `--json`: print the documented JSON shape (docs/workerctl.md) instead of a table.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print JSON (shapes in docs/workerctl.md) instead of a table.")
    var json = false
}

/// Runs an operator command body, mapping every failure to a `CLIError` so that the user sees one
/// line and the documented exit code: request errors 2, Redis failures and "not found" 1.
func adminCall<T>(_ body: () throws -> T) throws -> T {
    do { return try body() } catch let error as CLIError {
        throw error
    } catch let error as AdminError {
        throw error.isUsageError ? CLIError.usage(error.description) : CLIError.runtime(error.description)
    } catch let error as RedisError {
        throw CLIError.runtime(error.description)
    } catch {
        throw CLIError.runtime("\(error)")
    }
}

/// Parses `--state`.
func parseState(_ name: String?, required: Bool = true, allowed: [JobState] = JobState.allCases) throws -> JobState? {
    guard let name else {
        if required { throw CLIError.usage("--state is required: one of \(allowed.map(\.rawValue).joined(separator: ", "))") }
        return nil
    }
    guard let state = JobState(name: name), allowed.contains(state) else {
        throw CLIError.usage("unknown state '\(name)': expected one of \(allowed.map(\.rawValue).joined(separator: ", "))")
    }
    return state
}

func pageRequest(page: Int, size: Int) throws -> PageRequest {
    do { return try PageRequest(number: page, size: size) } catch { throw CLIError.usage(error.description) }
}

/// Asks before bulk-destructive commands. On a terminal (stdin is a tty) it asks `[y/N]`;
/// otherwise it requires `--yes` and fails with exit 2 saying so.
enum Confirmation {
    static func require(_ what: String, yes: Bool) throws {
        if yes { return }
        guard isatty(0) == 1 else {
            throw CLIError.usage("refusing to \(what) without confirmation: stdin is not a terminal; pass --yes")
        }
        printError("About to \(what). Continue? [y/N] ", terminator: "")
        let answer = readLine()?.trimmingCharacters(in: .whitespaces).lowercased()
        guard answer == "y" || answer == "yes" else { throw CLIError.runtime("aborted; nothing changed") }
    }
}

/// Prints a `JSONValue` as one line of compact JSON.
func printJSON(_ value: JSONValue) { print(value.serialized()) }

// MARK: Formatting for tables

enum Format {
    /// `2026-11-22 07:01:05` (UTC); `-` for nil, 0 or a value that is not a time (`Bounded.epochSeconds`: a
    /// ZSET score of `inf`, a payload's `1e300`), never a trap.
    static func time(_ epoch: Double?) -> String {
        guard let epoch = Bounded.epochSeconds(epoch), epoch > 0 else { return "-" }
        var t = time_t(epoch)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%04d-%02d-%02d %02d:%02d:%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    /// ISO 8601 UTC with milliseconds, for JSON: `2026-11-22T07:01:05.123Z`.
    static func iso(_ epoch: Double?) -> JSONValue {
        guard let epoch = Bounded.epochSeconds(epoch) else { return .null }
        var t = time_t(epoch.rounded(.down))
        var parts = tm()
        gmtime_r(&t, &parts)
        let millis = Int(((epoch - epoch.rounded(.down)) * 1000).rounded(.down))
        return .string(String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900,
                              Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min),
                              Int(parts.tm_sec), millis))
    }

    /// `4.2s`, `3m05s`, `2h07m`, `3d04h`; `unknown` for nil or a value that is not finite. Total (`Bounded.int`):
    /// a latency from a producer's timestamp never traps.
    static func duration(_ seconds: Double?) -> String {
        guard let seconds, seconds.isFinite else { return "unknown" }
        let s = max(0, seconds)
        if s < 60 { return String(format: "%.1fs", s) }
        let whole = Bounded.int(s, in: 0...Int.max)
        if whole < 3600 { return String(format: "%dm%02ds", whole / 60, whole % 60) }
        if whole < 86_400 { return String(format: "%dh%02dm", whole / 3600, (whole % 3600) / 60) }
        return String(format: "%dd%02dh", whole / 86_400, (whole % 86_400) / 3600)
    }

    /// `12ms`, `1.1s`, `Slow` (infinite: a histogram's last bucket); `-` for NaN.
    static func milliseconds(_ ms: Double) -> String {
        if ms.isNaN { return "-" }
        if ms == .infinity { return "Slow" }
        if ms < 1_000 { return "\(Bounded.int(ms.rounded(), in: -Bounded.maxCounter...999))ms" }
        return duration(ms / 1_000)
    }

    /// `in 3m05s` or `3m05s ago`.
    static func relative(_ epoch: Double?, now: Double) -> String {
        guard let epoch = Bounded.epochSeconds(epoch), epoch > 0 else { return "-" }
        return epoch >= now ? "in \(duration(epoch - now))" : "\(duration(now - epoch)) ago"
    }

    static func bytes(_ count: Int) -> String {
        let units = ["B", "K", "M", "G", "T"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(count)B" : String(format: "%.1f%@", value, units[unit])
    }

    /// Cuts `text` to `width` characters (with `…`), on one line.
    static func cut(_ text: String, _ width: Int) -> String {
        let oneLine = text.replacingOccurrences(of: "\n", with: " ")
        guard oneLine.count > width, width > 1 else { return oneLine }
        return String(oneLine.prefix(width - 1)) + "…"
    }
}

/// A plain-text table: left-aligned columns separated by two spaces.
struct TextTable {
    var headers: [String]
    var rows: [[String]] = []
    /// Cells longer than this are cut with `…`.
    var maxCellWidth = 60

    init(_ headers: [String]) { self.headers = headers }

    mutating func add(_ row: [String]) { rows.append(row.map { Format.cut($0, maxCellWidth) }) }

    func lines() -> [String] {
        var widths = headers.map(\.count)
        for row in rows { for (index, cell) in row.enumerated() where index < widths.count { widths[index] = max(widths[index], cell.count) } }
        func line(_ cells: [String]) -> String {
            var parts: [String] = []
            for (index, cell) in cells.enumerated() {
                let last = index == cells.count - 1
                parts.append(last ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0))
            }
            var text = parts.joined(separator: "  ")
            while text.last == " " { text.removeLast() }
            return text
        }
        return [line(headers)] + rows.map(line)
    }

    func print() { for line in lines() { workerctl.print(line) } }
}
