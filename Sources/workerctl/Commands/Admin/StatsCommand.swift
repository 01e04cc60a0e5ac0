import ArgumentParser
import Foundation
import Queue

struct StatsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Show processed/failed counts, queue sizes and latency, sets, processes and Redis.",
        discussion: """
            Numbers are defined as Ruby's Sidekiq::Stats defines them: "today" is the UTC day \
            (stat:processed:YYYY-MM-DD); processes is SCARD processes (stale entries count until \
            `workerctl workers prune`); busy is the sum of the processes' busy fields; latency is \
            now - enqueued_at of the oldest job in the queue.
            """
    )

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        try adminCall {
            let map = try connection.shardMap()
            if !map.isSingle { return try runSharded(map) }
            let stats = try Stats.load(try connection.connect())
            if output.json { return printJSON(AdminJSON.stats(stats)) }
            print("Processed  \(stats.processed)  (today \(stats.processedToday), \(stats.day) UTC)")
            print("Failed     \(stats.failed)  (today \(stats.failedToday))")
            print("Enqueued   \(stats.enqueued)    Scheduled \(stats.scheduled)    Retry \(stats.retries)    Dead \(stats.dead)")
            print("Processes  \(stats.processes)    Busy \(stats.busy)")
            print("Redis      \(stats.redis.version)    used memory \(stats.redis.usedMemoryHuman) (\(stats.redis.usedMemory) bytes)")
            print("")
            QueuesCommand.table(stats.queues).print()
        }
    }

    /// Several shards: one row per shard, then every queue with its shard; JSON: `{"shards": [stats + "shard"]}`.
    private func runSharded(_ map: ShardMap) throws {
        var all: [(shard: String, stats: Stats)] = []
        for shard in map.shards { all.append((shard.name, try Stats.load(try connection.connect(shard: shard)))) }
        if output.json {
            return printJSON(.object(["shards": .array(all.map { AdminJSON.sharded(AdminJSON.stats($0.stats), shard: $0.shard) })]))
        }
        var table = TextTable(["SHARD", "PROCESSED", "FAILED", "ENQUEUED", "SCHEDULED", "RETRY", "DEAD", "PROCESSES", "BUSY", "MEMORY"])
        for (shard, stats) in all {
            table.add([shard, "\(stats.processed)", "\(stats.failed)", "\(stats.enqueued)", "\(stats.scheduled)",
                       "\(stats.retries)", "\(stats.dead)", "\(stats.processes)", "\(stats.busy)", stats.redis.usedMemoryHuman])
        }
        let total = Stats.total(all.map(\.stats))
        table.add(["(all)", "\(total.processed)", "\(total.failed)", "\(total.enqueued)", "\(total.scheduled)",
                   "\(total.retries)", "\(total.dead)", "", "", ""])
        table.print()
        print("")
        QueuesCommand.table(sharded: all.flatMap { entry in entry.stats.queues.map { (entry.shard, $0) } }).print()
    }
}
