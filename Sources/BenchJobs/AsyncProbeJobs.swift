import Foundation
import WorkersQueue
import Workers

/// The async no-op (`AsyncNoop`, any `args`): an `AsyncJob` that returns at once, the async side of `Noop` in
/// bench/throughput.sh's `ASYNC=1` (worker CPU per job and drain of a task per run next to a pool thread's run).
/// A bench job: registered only with `--bench-jobs`.
public struct AsyncNoopJob: AsyncJob {
    public struct Arguments: IgnoredJobArguments {
        public static let className = "AsyncNoop"
        public init() {}
    }
    public init() {}
    public func perform(_ arguments: Arguments, context: JobContext) async throws {}
}

/// `PickupProbe` as an `AsyncJob` (`AsyncPickupProbe`, `[folder]`): at the start of its task it appends
/// `now - enqueued_at` to `<folder>/pickup.<pid>` (`PickupSamples`), so bench/throughput.sh's `ASYNC=1` reads the
/// async pickup with the same script as the sync one. A bench job: registered only with `--bench-jobs`.
public struct AsyncPickupProbeJob: AsyncJob {
    /// `[folder]`.
    public struct Arguments: SingleJobArgument, Equatable {
        public static let className = "AsyncPickupProbe"
        public let value: String
        public init(value: String) { self.value = value }
    }
    public init() {}

    public func perform(_ arguments: Arguments, context: JobContext) async throws {
        let now = Clock.now()
        guard let enqueuedAt = context.payload.enqueuedAt else { return }
        try PickupSamples.record(now - enqueuedAt, folder: arguments.value)
    }
}
