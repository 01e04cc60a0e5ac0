import Foundation
import WorkersQueue
import Workers

/// The bench job of encrypted personal arguments (bench/subject_keys.sh, issue 37 point 4): `[{"user_id": "<uuid>",
/// "receipt": "<string>", "n": Int}]`, `receipt` personal under `user_id`'s data key (docs/jobs-privacy.md). `perform`
/// does nothing: what a drain of it measures is the runtime's path — the opener (a key fetch on a cold cache, the
/// AES-GCM open) and the decode — next to the same arguments in clear.
///
/// A bench job: registered only by `workerctl worker|run --bench-jobs` on a worker with a KEK configured
/// (`BenchJobs.registerSealedProbe`), since a registry declaring personal arguments refuses to start without the key
/// store (`JobRegistry.checkPersonalArguments()`). Any pool thread may run it.
public struct SealedProbeJob: Job {
    public struct Arguments: JobArguments, Equatable {
        public static let className = "SealedProbe"
        public static let personalFields: Set<String> = ["receipt"]
        public static let subjectField: String? = "user_id"
        public let userID: UUID
        /// Personal (`Personal`: `[receipt]` in any text; `reveal()` gives the value).
        public let receipt: Personal<String>
        public let n: Int

        enum CodingKeys: String, CodingKey {
            case userID = "user_id", receipt, n
        }

        public init(userID: UUID, receipt: String, n: Int) {
            self.userID = userID
            self.receipt = Personal(receipt, field: CodingKeys.receipt.rawValue)
            self.n = n
        }
    }

    public init() {}

    public func perform(_ arguments: Arguments, context: JobContext) throws {}
}
