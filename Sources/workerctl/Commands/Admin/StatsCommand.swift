import ArgumentParser
import Foundation
import WorkersQueue

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
    @Flag(help: "Per-class execution metrics instead (runs, failures, total and p50/p95 time of successful runs).")
    var classes = false
    @Option(help: "With --classes: hour (last 60 minutes) or day (last 24 hours).")
    var period: String = "hour"

    func run() throws {
        try adminCall {
            if classes { return try runClasses() }
            let map = try connection.shardMap()
            if !map.isSingle { return try runSharded(map) }
            let stats = try Stats.load(try connection.connect())
            if stats.partial {
                printPartial("enqueued and busy sum the first \(QueueAdmin.sampleNames) queue names and \(Stats.sampleProcesses) processes read (of \(stats.queueNames) queues, \(stats.processes) processes)")
            }
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

    /// `--classes`: one row per class, busiest first, summed over every shard.
    private func runClasses() throws {
        guard let period = ClassMetricsPeriod(rawValue: period) else {
            throw ValidationError("--period must be hour or day, not \(Format.cut(period, 40))")
        }
        let map = try connection.shardMap()
        let summaries = try ClassMetricsReport.load(try map.shards.map { try connection.connect(shard: $0) },
                                                    period: period)
        if output.json { return printJSON(.object(["period": .string(period.rawValue),
                                                   "classes": .array(summaries.map(AdminJSON.classMetrics))])) }
        var table = TextTable(["CLASS", "RUNS", "FAILED", "TOTAL", "MEAN", "P50 ≤", "P95 ≤"])
        for summary in summaries {
            table.add([summary.className, "\(summary.runs)", "\(summary.failed)",
                       Format.milliseconds(Double(summary.totalMilliseconds)),
                       summary.meanMilliseconds.map(Format.milliseconds) ?? "-",
                       summary.p50Milliseconds.map(Format.milliseconds) ?? "-",
                       summary.p95Milliseconds.map(Format.milliseconds) ?? "-"])
        }
        print("Per-class metrics, last \(period.rawValue) (successful runs' times; percentiles are histogram bucket bounds)")
        table.print()
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
