import ServiceLifecycle

/// `WorkersClient` as a swift-service-lifecycle `Service`, so a `ServiceGroup` closes it in order
/// (docs/embedding.md, Examples/AppService).
///
/// `run()` does no work of its own: it waits for the group's graceful shutdown (or its task's cancellation), then
/// calls `shutdown()`: the calls already queued finish on the client's threads, later ones throw
/// `WorkersClientError.shutDown`, and the threads end. Put the client before the services that enqueue through it
/// (and before a `WorkerProcess` whose jobs use it): a `ServiceGroup` shuts its services down in reverse order, so
/// they have stopped before the client closes.
///
/// Thread rules: `run()` once. `shutdown()` does not block (it only marks the threads' queue closed), so it runs on
/// the awaiting task's thread.
extension WorkersClient: Service {
    public func run() async throws {
        // gracefulShutdown() throws only CancellationError: a cancelled task closes the client the same way.
        try? await gracefulShutdown()
        shutdown()
    }
}
