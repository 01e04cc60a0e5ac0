import Foundation
import WorkersQueue
import XCTest

/// Private `redis-server` children on loopback, one per shard, for the sharding tests
/// (docs/sharding.md). Ports: `SHARD_TEST_PORTS` (comma-separated; default 6467,6468,6469), the
/// first `count` of them. No persistence; each server's database 0 starts empty. Owned by one test
/// thread; `stop()` (or deinit) kills every child.
public final class ShardServers {
    public let ports: [Int]
    private var children: [ChildProcess] = []
    private let directory: URL

    public init(count: Int) throws {
        let configured = (ProcessInfo.processInfo.environment["SHARD_TEST_PORTS"] ?? "6467,6468,6469")
            .split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard configured.count >= count else {
            throw XCTSkip("SHARD_TEST_PORTS names \(configured.count) ports; \(count) needed")
        }
        ports = Array(configured.prefix(count))
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("shards-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let redisServer = try XCTUnwrap(TestServices.which("redis-server"), "redis-server is not installed")
        for port in ports {
            children.append(try ChildProcess(executable: redisServer, arguments: [
                "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
                "--appendonly", "no", "--dbfilename", "dump-\(port).rdb"]))
        }
        for (index, port) in ports.enumerated() {
            let up = eventually(timeout: 10) { (try? RedisConnection(url: url(index)).command("PING").string) == "PONG" }
            if !up { throw XCTSkip("redis-server on port \(port) did not start: \(children[index].stderr)") }
            _ = try RedisConnection(url: url(index)).command("FLUSHALL")
        }
    }

    deinit { stop() }

    /// `redis://127.0.0.1:PORT/0` of shard `index`.
    public func url(_ index: Int) -> String { "redis://127.0.0.1:\(ports[index])/0" }

    public func connection(_ index: Int) throws -> RedisConnection { try RedisConnection(url: url(index)) }

    /// Every key of shard `index`, sorted.
    public func keys(_ index: Int) throws -> [String] { try connection(index).command("KEYS", "*").strings.sorted() }

    public func int(_ index: Int, _ arguments: any RedisArgument...) throws -> Int {
        Int(try connection(index).send(arguments).checked().integer ?? 0)
    }

    public func stop() {
        for child in children where child.isRunning {
            child.signal(SIGKILL)
            child.wait()
        }
        children = []
        try? FileManager.default.removeItem(at: directory)
    }
}
