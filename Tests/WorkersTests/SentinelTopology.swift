import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// A private Redis Sentinel deployment on loopback for the failover tests: one master, one replica
/// and three Sentinels (quorum 2), each a `redis-server` child in a temporary directory
/// (Sentinels run as `redis-server <file> --sentinel`, which is all Debian's `redis-sentinel` is).
///
/// Fixed test ports, overridable like ChaosTests' settings: `SENTINEL_TEST_MASTER_PORT` (6440),
/// `SENTINEL_TEST_REPLICA_PORT` (6441), `SENTINEL_TEST_SENTINEL_PORTS` (26440,26441,26442).
/// No persistence on either server: what the master had not replicated when it died is gone, which
/// is what the tests measure. Owned by one test thread; `stop()` kills every child.
final class SentinelTopology {
    static let masterName = "mymaster"
    let masterPort: Int
    let replicaPort: Int
    let sentinelPorts: [Int]
    private let directory: URL
    private(set) var master: ChildProcess?
    private var others: [ChildProcess] = []

    init() throws {
        let environment = ProcessInfo.processInfo.environment
        masterPort = Int(environment["SENTINEL_TEST_MASTER_PORT"] ?? "") ?? 6440
        replicaPort = Int(environment["SENTINEL_TEST_REPLICA_PORT"] ?? "") ?? 6441
        sentinelPorts = (environment["SENTINEL_TEST_SENTINEL_PORTS"] ?? "26440,26441,26442")
            .split(separator: ",").compactMap { Int($0) }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sentinel-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let redisServer = try XCTUnwrap(TestServices.which("redis-server"), "redis-server is not installed")
        func server(_ port: Int, _ extra: [String]) throws -> ChildProcess {
            try ChildProcess(executable: redisServer, arguments: [
                "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
                "--appendonly", "no", "--dbfilename", "dump-\(port).rdb"] + extra)
        }
        master = try server(masterPort, [])
        others.append(try server(replicaPort, ["--replicaof", "127.0.0.1", "\(masterPort)"]))
        for port in sentinelPorts {
            // A Sentinel rewrites its configuration file, so each gets its own.
            let file = directory.appendingPathComponent("sentinel-\(port).conf")
            try """
                port \(port)
                bind 127.0.0.1
                dir \(directory.path)
                sentinel monitor \(Self.masterName) 127.0.0.1 \(masterPort) 2
                sentinel down-after-milliseconds \(Self.masterName) 1000
                sentinel failover-timeout \(Self.masterName) 10000
                sentinel parallel-syncs \(Self.masterName) 1

                """.write(to: file, atomically: true, encoding: .utf8)
            others.append(try ChildProcess(executable: redisServer, arguments: [file.path, "--sentinel"]))
        }
    }

    deinit { stop() }

    /// The URL clients are given: all three Sentinels and the master's name.
    func url(database: Int = 0) -> String {
        "redis+sentinel://" + sentinelPorts.map { "127.0.0.1:\($0)" }.joined(separator: ",")
            + "/\(Self.masterName)/\(database)"
    }

    func sentinel(_ index: Int = 0) throws -> RedisConnection {
        try RedisConnection(url: "redis://127.0.0.1:\(sentinelPorts[index])/0", commandTimeout: .seconds(2))
    }

    /// The master's port as Sentinel `index` names it, nil if it cannot be asked.
    func masterPortNamed(by index: Int) -> Int? {
        guard let reply = try? sentinel(index).command("SENTINEL", "get-master-addr-by-name", Self.masterName) else { return nil }
        return reply.strings.count == 2 ? Int(reply.strings[1]) : nil
    }

    /// Waits until the replica is in sync and every Sentinel knows the master, the replica and the
    /// two other Sentinels (without that, no failover can be elected).
    func waitUntilReady() throws {
        let ready = eventually(timeout: 30) {
            guard let replica = try? RedisConnection(url: "redis://127.0.0.1:\(replicaPort)/0", commandTimeout: .seconds(2)),
                  let info = try? replica.command("INFO", "replication").string,
                  info.contains("master_link_status:up") else { return false }
            return sentinelPorts.indices.allSatisfy { index in
                guard let fields = try? sentinel(index).command("SENTINEL", "master", Self.masterName).strings else { return false }
                let map = Dictionary(stride(from: 0, to: fields.count - 1, by: 2).map { (fields[$0], fields[$0 + 1]) },
                                     uniquingKeysWith: { a, _ in a })
                return map["num-slaves"] == "1" && map["num-other-sentinels"] == "\(sentinelPorts.count - 1)"
                    && map["flags"] == "master"
            }
        }
        XCTAssertTrue(ready, "the Sentinel deployment did not settle")
    }

    /// SIGKILLs the replica (it does not come back).
    func killReplica() {
        others.first?.signal(SIGKILL)
        others.first?.wait()
    }

    /// SIGKILLs the master (no persistence: it does not come back).
    func killMaster() {
        master?.signal(SIGKILL)
        master?.wait()
        master = nil
    }

    func stop() {
        for child in [master].compactMap({ $0 }) + others { child.signal(SIGKILL); child.wait(timeout: 5) }
        master = nil
        others = []
        try? FileManager.default.removeItem(at: directory)
    }
}
