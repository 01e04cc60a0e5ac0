import Foundation

/// Which Redis instance (shard) holds which queue (docs/sharding.md).
///
/// Each shard is a whole Redis in Sidekiq's layout (`queue:*`, `schedule`, `retry`, `dead`,
/// `processes`, …, no key prefix), so Sidekiq's tools work on each one by itself. A queue lives on
/// exactly one shard: the one `queueShards` names, else the default shard (index 0, named
/// `default`, the `REDIS_URL`). Everything keyed by a job (its unique lock, its batch, its
/// in-flight list, its retry/schedule/dead entry) lives on its queue's shard.
///
/// Immutable; share freely between threads.
public struct ShardMap: Sendable, Equatable {
    /// One Redis instance of the fleet.
    public struct Shard: Sendable, Equatable {
        public let name: String
        public let endpoint: RedisEndpoint
    }

    /// The name of the shard `REDIS_URL` names, which holds every queue no entry maps elsewhere.
    public static let defaultName = "default"

    /// Index 0 is the default shard; the others in the order they were configured.
    public let shards: [Shard]
    /// Queue name → index in `shards`, for the queues not on the default shard.
    private let queueIndex: [String: Int]

    /// One shard (today's single Redis): every queue maps to it.
    public init(single endpoint: RedisEndpoint) {
        shards = [Shard(name: Self.defaultName, endpoint: endpoint)]
        queueIndex = [:]
    }

    /// `defaultURL` is the default shard; `shards` the others (name, URL); `queues` maps a queue to
    /// one of those names (or `default`). Throws on an unparseable URL, a shard named twice, a queue
    /// mapped to a shard that does not exist, or one queue mapped twice.
    public init(defaultURL: String, shards named: [(name: String, url: String)],
                queues: [(queue: String, shard: String)]) throws(ShardMapError) {
        var list: [Shard] = []
        do { list.append(Shard(name: Self.defaultName, endpoint: try RedisEndpoint(url: defaultURL))) } catch {
            throw .invalid("default shard: \(error)")
        }
        for (name, url) in named {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
                throw .invalid("shard name '\(name)' must be letters, digits, '_' or '-'")
            }
            guard !list.contains(where: { $0.name == name }) else {
                throw .invalid("shard '\(name)' is named twice (the default shard is REDIS_URL)")
            }
            do { list.append(Shard(name: name, endpoint: try RedisEndpoint(url: url))) } catch {
                throw .invalid("shard '\(name)': \(error)")
            }
        }
        var index: [String: Int] = [:]
        for (queue, shard) in queues {
            guard let position = list.firstIndex(where: { $0.name == shard }) else {
                throw .invalid("queue '\(queue)' is mapped to shard '\(shard)', which is not configured")
            }
            do { try JobClient.validateQueue(queue) } catch { throw .invalid(error.description) }
            guard index[queue] == nil else { throw .invalid("queue '\(queue)' is mapped twice") }
            if position != 0 { index[queue] = position }
        }
        shards = list
        queueIndex = index
    }

    /// True when only the default shard is configured (the single-Redis code paths).
    public var isSingle: Bool { shards.count == 1 }

    /// The index in `shards` of the shard holding `queue`.
    public func shardIndex(forQueue queue: String) -> Int { queueIndex[queue] ?? 0 }

    public func shard(forQueue queue: String) -> Shard { shards[shardIndex(forQueue: queue)] }

    /// `queues` grouped by shard index, each group in the given order; shards holding none are left out.
    public func group(queues: [String]) -> [(shard: Int, queues: [String])] {
        var groups: [(shard: Int, queues: [String])] = []
        for queue in queues {
            let shard = shardIndex(forQueue: queue)
            if let at = groups.firstIndex(where: { $0.shard == shard }) { groups[at].queues.append(queue) } else {
                groups.append((shard, [queue]))
            }
        }
        return groups
    }

    /// The queues explicitly mapped, with their shard names (for docs and `workerctl`).
    public var mappedQueues: [(queue: String, shard: String)] {
        queueIndex.sorted { $0.key < $1.key }.map { ($0.key, shards[$0.value].name) }
    }

    public static func == (lhs: ShardMap, rhs: ShardMap) -> Bool {
        lhs.shards == rhs.shards && lhs.queueIndex == rhs.queueIndex
    }

    // MARK: Environment form

    /// `REDIS_SHARDS` (`name=url,name=url`) and `QUEUE_SHARDS` (`queue=name,queue=name`) over the
    /// default shard `defaultURL`. Config-file entries (`fileShards`, `fileQueues`) are used for a kind the
    /// environment leaves unset or empty (as an empty `REDIS_URL` counts as unset).
    public static func from(environment: [String: String], defaultURL: String,
                            fileShards: [(name: String, url: String)] = [],
                            fileQueues: [(queue: String, shard: String)] = []) throws(ShardMapError) -> ShardMap {
        let shards = try environment["REDIS_SHARDS"].flatMap({ $0.isEmpty ? nil : $0 }).map { text throws(ShardMapError) in
            try parsePairs(text, what: "REDIS_SHARDS")
        }?.map { (name: $0.0, url: $0.1) } ?? fileShards
        let queues = try environment["QUEUE_SHARDS"].flatMap({ $0.isEmpty ? nil : $0 }).map { text throws(ShardMapError) in
            try parsePairs(text, what: "QUEUE_SHARDS")
        }?.map { (queue: $0.0, shard: $0.1) } ?? fileQueues
        return try ShardMap(defaultURL: defaultURL, shards: shards, queues: queues)
    }

    /// Splits `a=x,b=y`. A `redis+sentinel://` URL holds commas between its Sentinels, so a piece
    /// with no `=` before its first `/` or `:` continues the previous value.
    static func parsePairs(_ text: String, what: String) throws(ShardMapError) -> [(String, String)] {
        var pairs: [(String, String)] = []
        for piece in text.split(separator: ",", omittingEmptySubsequences: true) {
            let piece = piece.trimmingCharacters(in: .whitespaces)
            if piece.isEmpty { continue }
            let head = piece.prefix { $0 != "/" && $0 != ":" }
            if let equals = head.firstIndex(of: "=") {
                let name = String(piece[..<equals]).trimmingCharacters(in: .whitespaces)
                let value = String(piece[piece.index(after: equals)...]).trimmingCharacters(in: .whitespaces)
                guard !name.isEmpty, !value.isEmpty else { throw .invalid("\(what): '\(piece)' is not NAME=VALUE") }
                pairs.append((name, value))
            } else if let last = pairs.popLast() {
                pairs.append((last.0, last.1 + "," + piece))
            } else {
                throw .invalid("\(what): '\(piece)' is not NAME=VALUE")
            }
        }
        return pairs
    }
}

/// A shard map that cannot be used, with the reason.
public enum ShardMapError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalid(String)
    public var description: String {
        switch self {
        case .invalid(let why): return "shard map: \(why)"
        }
    }
}
