import ArgumentParser
import Foundation
import Workers

struct WorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Run a worker process: a pool of threads running jobs from Redis.",
        discussion: """
            SIGTERM/SIGINT: stop fetching, let running jobs finish (up to --shutdown-timeout), put \
            unfinished ones back, exit. SIGTSTP or Sidekiq's quiet: stop fetching.
            """
    )

    @OptionGroup var worker: WorkerOptions

    func run() throws {
        let (process, relay) = try worker.makeProcessAndRelay()
        try worker.run(process, relay: relay)
    }
}
