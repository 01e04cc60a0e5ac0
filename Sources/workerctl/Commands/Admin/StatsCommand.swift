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
}
