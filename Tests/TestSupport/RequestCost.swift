import Foundation
import WorkersQueue
import XCTest

/// What one request cost Redis, counted by Redis itself (`INFO stats`, `INFO commandstats`): no clock is read, so
/// the same request on the same data costs the same on a loaded machine and an idle one.
public struct RequestCost: Sendable, CustomStringConvertible {
    /// Commands Redis executed for the request (pipelined or not; a Lua script's inner calls count too).
    public var commands: Int
    /// Bytes Redis wrote to its clients for the request (`total_net_output_bytes`): the replies.
    public var replyBytes: Int
    /// Microseconds Redis's thread spent executing them (`INFO commandstats` usec): for benches and messages only,
    /// never asserted.
    public var microseconds: Int
    /// Calls per command name (`llen`, `sscan`, `config|get`…).
    public var calls: [String: Int]

    public var description: String {
        let top = calls.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.prefix(6)
            .map { "\($0.key)×\($0.value)" }.joined(separator: " ")
        return "\(commands) commands, \(replyBytes) reply bytes, \(microseconds) µs of Redis time (\(top))"
    }
}

/// A redis-server of the test's own (its own port, `--save ''`, no AOF) that no other client touches, and the meter
/// of what each request costs on it: `measure` sends `CONFIG RESETSTAT`, runs the request, then reads `INFO stats
/// commandstats` and takes out its own `CONFIG RESETSTAT` (one command, a 5-byte `+OK`). The `INFO` call itself
/// is not in its own reply. Owned by one test thread; `stop()` (or deinit) kills the server.
public final class RequestCostMeter {
    public let port: Int
    public let url: String
    private let server: ChildProcess
    private let meter: RedisConnection

    /// Starts redis-server on `port` (a port of the test's own range) and empties it.
    public init(port: Int) throws {
        self.port = port
        url = "redis://127.0.0.1:\(port)/0"
        server = try TestServices.startRedisServer(port: port, ["--databases", "1"])
        var connection: RedisConnection?
        let up = eventually(timeout: 10) {
            connection = try? RedisConnection(url: "redis://127.0.0.1:\(port)/0")
            return (try? connection?.command("PING").string) == "PONG"
        }
        guard up, let connection else {
            server.signal(SIGKILL)
            _ = server.wait()
            throw XCTSkip("redis-server on port \(port) did not start: \(server.stderr)")
        }
        meter = connection
        try meter.command("FLUSHALL")
    }

    deinit { stop() }

    public func stop() {
        meter.close()
        if server.isRunning {
            server.signal(SIGKILL)
            _ = server.wait()
        }
    }

    /// A connection for setting up data (not counted: set up before `measure`).
    public func connection() throws -> RedisConnection { try RedisConnection(url: url) }

    /// What `request` cost Redis: everything every client sent between the reset and the read.
    public func measure(_ request: () throws -> Void) throws -> RequestCost {
        try meter.command("CONFIG", "RESETSTAT")
        try request()
        let info = try meter.command("INFO", "stats", "commandstats").string ?? ""
        var cost = RequestCost(commands: 0, replyBytes: 0, microseconds: 0, calls: [:])
        for line in info.split(whereSeparator: \.isNewline) {
            if line.hasPrefix("total_commands_processed:") {
                cost.commands = Int(line.dropFirst("total_commands_processed:".count)) ?? 0
            } else if line.hasPrefix("total_net_output_bytes:") {
                cost.replyBytes = Int(line.dropFirst("total_net_output_bytes:".count)) ?? 0
            } else if line.hasPrefix("cmdstat_"), let colon = line.firstIndex(of: ":") {
                let name = String(line[line.index(line.startIndex, offsetBy: 8)..<colon])
                var fields: [Substring: Int] = [:]
                for pair in line[line.index(after: colon)...].split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    if parts.count == 2, let value = Int(parts[1]) { fields[parts[0]] = value }
                }
                if name == "config|resetstat" { continue }
                cost.calls[name] = fields["calls"] ?? 0
                cost.microseconds += fields["usec"] ?? 0
            }
        }
        cost.commands -= 1
        cost.replyBytes -= 5
        return cost
    }
}
