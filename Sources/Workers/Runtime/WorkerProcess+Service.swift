import Foundation
import ServiceLifecycle

/// `WorkerProcess` as a swift-service-lifecycle `Service`: a service runs its workers inside its own executable by
/// putting the process into its `ServiceGroup` (docs/embedding.md, Examples/AppService).
extension WorkerProcess: Service {
    /// `run()` starts the process (metrics endpoint, first heartbeat, every thread) and returns once it has stopped.
    /// The stop is the process's own graceful `shutdown()` (quiet, wait up to `shutdownTimeout` for running jobs, put
    /// the rest back, write every settlement, deregister), begun by the group's graceful shutdown, by the cancellation of
    /// `run()`'s task, or by Sidekiq's `TERM` sent through Redis (`workerctl` against the fleet). A process that stopped
    /// on its own (Redis `TERM`) returns from `run()` too, which a `ServiceGroup` treats as the end of the group unless the
    /// service's `successTerminationBehavior` says otherwise.
    ///
    /// Signals: under a `ServiceGroup` the process installs no signal handler (the group owns SIGTERM/SIGINT, via its
    /// `gracefulShutdownSignals`); `runHandlingSignals()` is the blocking entry point of executables without one
    /// (`workerctl worker`).
    ///
    /// Thread rules: `run()` once, instead of `start()`/`runHandlingSignals()`. The blocking calls (`start()` reaches
    /// Redis, `shutdown()` waits seconds for running jobs, the wait for the stop) run on threads of their own, never on a
    /// cooperative-pool thread; the awaiting task is suspended meanwhile.
    public func run() async throws {
        try await OwnThread.run(name: "worker-start") { [self] in try start() }
        try await withTaskCancellationOrGracefulShutdownHandler {
            try await OwnThread.run(name: "worker-wait") { [self] in waitUntilStopped() }
        } onCancelOrGracefulShutdown: { [self] in
            // Blocks up to shutdownTimeout + settleGrace: on a thread of its own, not in the handler's caller.
            RuntimeThread.spawn("worker-shutdown", group: DispatchGroup()) { [self] in shutdown() }
        }
    }
}

/// Blocking work an async caller awaits without blocking a cooperative-pool thread: `body` runs on a new named
/// thread and its result resumes the caller.
///
/// Thread rules: any task may call `run`; each call costs one thread for `body`'s duration.
enum OwnThread {
    static func run<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            RuntimeThread.spawn(name, group: DispatchGroup()) {
                continuation.resume(with: Result(catching: { try body() }))
            }
        }
    }
}
