import Foundation
import Logging
import WorkersQueue

@testable import Workers

extension RuntimeParts {
    /// The shared context for a runtime part a test builds by hand (e.g. `Fetcher(parts, unique:)`): one Redis, the
    /// configuration's `redisURL`; fresh hand-offs unless the test passes the ones it drives itself.
    static func forTesting(identity: String, configuration: WorkerConfiguration, buffer: JobBuffer? = nil,
                           running: RunningJobs = RunningJobs(), settlements: SettlementQueue = SettlementQueue(),
                           logger: Logger) throws -> RuntimeParts {
        RuntimeParts(identity: identity, configuration: configuration,
                     shardMap: ShardMap(single: try RedisEndpoint(url: configuration.redisURL)), startedAt: Clock.now(),
                     buffer: buffer ?? JobBuffer(capacity: configuration.concurrency + configuration.prefetch),
                     running: running, settlements: settlements, runTime: RunTimeEstimate(),
                     outages: OutageLog(logger: logger), flags: LifeCycleFlags(), metrics: RuntimeMetrics(),
                     registeredClasses: [], argumentVersions: [:], classMetrics: ClassMetricsRecorder(registeredClasses: []), logger: logger,
                     room: RedisRoom(logger: logger))
    }
}
