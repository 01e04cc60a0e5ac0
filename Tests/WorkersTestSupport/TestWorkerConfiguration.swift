import WorkersTestServices
import Workers

extension WorkerConfiguration {
    /// The configuration of every in-process test worker: `concurrency` threads on `queues` against the test
    /// Redis `redis`, with a fast heartbeat, orphan sweep, poll and shutdown so crash recovery and retries show
    /// within a test's patience. Test-only: production defaults stay in `WorkerConfiguration()`.
    public static func forTests(redis: TestRedis, concurrency: Int,
                                queues: [QueueWeight] = [QueueWeight(name: "default")]) -> WorkerConfiguration {
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.concurrency = concurrency
        configuration.queues = queues
        configuration.heartbeatInterval = .seconds(0.2)
        configuration.fetcherHeartbeatTTL = .seconds(1)
        configuration.orphanSweepInterval = .seconds(0.3)
        configuration.pollInterval = .seconds(0.2)
        configuration.shutdownTimeout = .seconds(2)
        return configuration
    }
}
