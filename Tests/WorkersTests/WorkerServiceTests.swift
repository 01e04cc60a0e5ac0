import Foundation
import Logging
import WorkersQueue
import ServiceLifecycle
import Synchronization
import WorkersTestServices
import Workers
import WorkersTestSupport
import XCTest

/// A job that takes `milliseconds` and then records its argument: running across the stop.
private struct SlowRecordJob: Job {
    struct Arguments: SingleJobArgument {
        static let className = "SlowRecord"
        let value: Int
        init(value: Int) { self.value = value }
    }
    let recorder: Recorder
    func perform(_ arguments: Arguments, context: JobContext) throws {
        Thread.sleep(forTimeInterval: Double(arguments.value) / 1000)
        recorder.append("done \(arguments.value)")
    }
}

/// `WorkerProcess` as a swift-service-lifecycle `Service` (WorkerProcess+Service.swift, docs/embedding.md): the
/// group's graceful shutdown runs the process's own graceful stop, and a process run by a group leaves the signals
/// to the group. Redis database 48.
final class WorkerServiceTests: XCTestCase {
    /// Waits for `task` at most `seconds`; false if it had not finished by then (awaiting a task's result does not
    /// end on cancellation, so a watcher sets a flag this polls).
    func finishes(_ task: Task<Void, any Error>, within seconds: Double) async -> Bool {
        let done = Recorder()
        Task { _ = await task.result; done.append("done") }
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if !done.all.isEmpty { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    func testGracefulShutdownOfTheGroupFinishesTheRunningJobAndDeregisters() async throws {
        let redis = try TestRedis(database: 48)
        let recorder = Recorder()
        var registry = JobRegistry.builtins()
        registry.register(SlowRecordJob(recorder: recorder))
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: .forTests(redis: redis, concurrency: 2), registry: registry, logger: logger)
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [process], logger: logger))
        let running = Task { try await group.run() }

        try redis.client.enqueue(NewJob("SlowRecord", args: [600]))
        XCTAssertTrue(eventually { process.busyCount == 1 }, "the job started")
        XCTAssertEqual(try redis.int("SCARD", "processes"), 1, "registered while running")
        await group.triggerGracefulShutdown()
        let stopped = await finishes(running, within: 10)
        if !stopped { process.shutdown() }  // so a failing run does not leave threads behind
        XCTAssertTrue(stopped, "run() returned after the group's graceful shutdown")
        XCTAssertEqual(recorder.all, ["done 600"], "the running job finished within shutdownTimeout")
        XCTAssertEqual(process.processedCount, 1)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0, "nothing was put back")
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0, "deregistered")
    }

    func testAProcessRunByAServiceGroupInstallsNoSignalHandler() async throws {
        let redis = try TestRedis(database: 48)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: .forTests(redis: redis, concurrency: 1), registry: .builtins(), logger: logger)
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [process], logger: logger))
        let running = Task { try await group.run() }
        XCTAssertTrue(eventually { (try? redis.int("SCARD", "processes")) == 1 }, "started")
        for number in [SIGTERM, SIGINT, SIGTSTP, SIGTTIN] {
            var current = sigaction()
            sigaction(number, nil, &current)
            #if os(Linux)
            XCTAssertNil(current.__sigaction_handler.sa_handler, "signal \(number) keeps its default disposition (the group owns the signals)")
            #else
            XCTAssertNil(current.__sigaction_u.__sa_handler, "signal \(number) keeps its default disposition (the group owns the signals)")
            #endif
        }
        running.cancel()  // the cancellation path stops the process too
        let stopped = await finishes(running, within: 10)
        if !stopped { process.shutdown() }
        XCTAssertTrue(stopped, "run() returned after its task was cancelled")
        XCTAssertEqual(try redis.int("SCARD", "processes"), 0, "deregistered")
    }
}
