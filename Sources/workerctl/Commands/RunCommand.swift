import ArgumentParser
import Foundation
import Workers
import WorkersScheduler

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run workers and the cron scheduler in one process.",
        discussion: """
            The worker starts exactly as `workerctl worker` does (same flags); the scheduler loop runs on its \
            own thread with the schedule file of --schedule. SIGTERM/SIGINT shuts the worker down gracefully \
            (as `worker`), then stops the scheduler. SIGHUP reloads the schedule file (as `scheduler`). An \
            invalid schedule file is refused before anything starts (exit 2).
            """
    )

    @OptionGroup var worker: WorkerOptions
    @OptionGroup var schedule: ScheduleOptions

    func run() throws {
        let file = try schedule.loadFile()
        signal(SIGHUP, SIG_IGN)  // a SIGHUP before the reload handler exists must not end the process
        let (process, relay) = try worker.makeProcessAndRelay()
        let runners = try schedule.makeRunners(file: file, redisURL: process.configuration.redisURL,
                                               shardMap: process.configuration.shardMap)
        // No signal source of our own: libdispatch installs one sigaction per signal when the first
        // source for it is created, and WorkerProcess's `signal(SIGTERM, SIG_IGN)` before its own
        // source would then silence both. The worker handles SIGTERM/SIGINT (and Sidekiq's TERM
        // through Redis); when it has shut down, `run()` returns and the scheduler is stopped.
        // SIGHUP (reload) is the scheduler's alone.
        let signals = SchedulerSignals(runners: runners)
        defer { withExtendedLifetime(signals) {} }
        for runner in runners { runner.start() }
        defer {
            for runner in runners { runner.stop() }
            for runner in runners { runner.waitUntilStopped() }
        }
        try worker.run(process, relay: relay)
    }
}
