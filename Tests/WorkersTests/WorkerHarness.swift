import Foundation
import Logging
import WorkersQueue
import Synchronization
import WorkersTestServices
import Workers
import WorkersTestSupport

/// Records the arguments of `Record` jobs in the order they ran.
final class Recorder: Sendable {
    private let values = Mutex<[String]>([])
    func append(_ value: String) { values.withLock { $0.append(value) } }
    var all: [String] { values.withLock { $0 } }
}

struct RecordJob: Job {
    struct Arguments: SingleJobArgument { static let className = "Record"; let value: String }
    let recorder: Recorder
    func perform(_ arguments: Arguments, context: JobContext) throws { recorder.append(arguments.value) }
}

/// A job with its own retry count, backoff and timeout.
struct TightJob: Job {
    struct Arguments: SingleJobArgument { static let className = "Tight"; let value: Int }
    static let options = JobOptions(maxRetries: 2, backoff: .schedule([.milliseconds(200)]), timeout: .seconds(0.5))
    func perform(_ arguments: Arguments, context: JobContext) throws {
        Thread.sleep(forTimeInterval: Double(arguments.value) / 1000)
    }
}

/// Builds worker processes with fast timings against a test database.
struct WorkerHarness {
    let redis: TestRedis
    let recorder = Recorder()

    var registry: JobRegistry {
        var registry = JobRegistry.builtins()
        registry.register(RecordJob(recorder: recorder))
        registry.register(TightJob())
        return registry
    }

    func configuration(concurrency: Int = 4, queues: [QueueWeight] = [QueueWeight(name: "default")]) -> WorkerConfiguration {
        .forTests(redis: redis, concurrency: concurrency, queues: queues)
    }

    func start(_ configuration: WorkerConfiguration) throws -> WorkerProcess {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: registry, logger: logger)
        try process.start()
        return process
    }
}
