import Foundation
@testable import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import WorkersTestServices
import Workers
import XCTest

/// The cost of encrypted personal arguments (issue 37 point 4; `bench/subject_keys.sh`, figures in
/// docs/benchmarks.md): opening a ~4 KB receipt argument per job across 10,000 subjects with a cold and a warm key
/// cache, next to decoding the same arguments in clear; and the receipts job's real path (the runner, the Apple
/// fake, the PostgreSQL transaction) with and without encryption. Skipped unless `SUBJECT_KEYS_BENCH=1`. Prints
/// the figures; asserts no duration. Redis database 63.
final class SubjectKeysBenchmarkTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "subject_keys_bench", redis: 193, fakes: .own([.apple]))
    }

    func testOpeningCostPerJobColdAndWarmAndOnTheReceiptPath() throws {
        guard ProcessInfo.processInfo.environment["SUBJECT_KEYS_BENCH"] == "1" else {
            throw XCTSkip("set SUBJECT_KEYS_BENCH=1 (bench/subject_keys.sh)")
        }
        let subjects = Int(ProcessInfo.processInfo.environment["SUBJECT_KEYS_BENCH_SUBJECTS"] ?? "") ?? 10_000
        let store = try SubjectKeyStore(pool: pool, current: KeyEncryptionKey.random(id: "bench"))
        let sealer = SubjectArgumentsSealer(store: store, classes: DomainJobs.personalArgumentTypes, cacheTTL: .zero)
        let receipt = String(repeating: "MIIT", count: 1024)  // 4 KB
        var clear: [[JSONValue]] = [], sealed: [(args: [JSONValue], jid: String)] = []
        let seeding = Date()
        for index in 0..<subjects {
            let job = try NewJob(ValidateReceiptArguments(userID: UUID(), appID: db.appID, planID: db.planID,
                                                          proof: .apple(receiptData: receipt, transactionID: "\(8_000_000 + index)",
                                                                        originalTransactionID: nil, signedTransaction: nil)))
            clear.append(job.args)
            let sealedJob = try sealer.sealed(job)
            sealed.append((sealedJob.args, sealedJob.jid ?? ""))
        }
        print("subject-keys-bench: \(subjects) subjects keyed and sealed in " + String(format: "%.1f", Date().timeIntervalSince(seeding)) + " s")
        func perJob(_ label: String, _ body: () throws -> Void) rethrows -> Double {
            let started = Date()
            try body()
            let micros = Date().timeIntervalSince(started) * 1e6 / Double(subjects)
            print("subject-keys-bench: \(label): " + String(format: "%.1f", micros) + " µs per job")
            return micros
        }
        let fields = ValidateReceiptArguments.personalFields
        let plain = try perJob("decode in clear") { for args in clear { _ = try ValidateReceiptArguments.decode(args: args) } }
        let opener = SubjectArgumentsOpener(store: store, redis: redis.pool, cacheTTL: .seconds(3600))
        let cold = try perJob("open (cold cache: one key fetch per subject) + decode") {
            for (args, jid) in sealed {
                _ = try ValidateReceiptArguments.decode(args: opener.open(args, className: "ValidateReceiptJob", jid: jid, fields: fields, subjectField: "user_id"))
            }
        }
        let warm = try perJob("open (warm cache) + decode") {
            for (args, jid) in sealed {
                _ = try ValidateReceiptArguments.decode(args: opener.open(args, className: "ValidateReceiptJob", jid: jid, fields: fields, subjectField: "user_id"))
            }
        }
        let bare = SubjectArgumentsOpener(store: store, redis: redis.pool, cacheTTL: .seconds(3600))
        _ = try perJob("open only (cold cache)") {
            for (args, jid) in sealed { _ = try bare.open(args, className: "ValidateReceiptJob", jid: jid, fields: fields, subjectField: "user_id") }
        }
        _ = try perJob("open only (warm cache)") {
            for (args, jid) in sealed { _ = try bare.open(args, className: "ValidateReceiptJob", jid: jid, fields: fields, subjectField: "user_id") }
        }
        print("subject-keys-bench: added per job: cold " + String(format: "%.1f", cold - plain) + " µs, warm "
              + String(format: "%.1f", warm - plain) + " µs")

        // The receipts job's real path, in clear and encrypted (warm: one user per 10 jobs).
        let jobs = Int(ProcessInfo.processInfo.environment["SUBJECT_KEYS_BENCH_JOBS"] ?? "") ?? 300
        var users: [UUID] = []
        for _ in 0..<max(1, jobs / 10) { users.append(try db.newUser()) }
        try fakes.admin(.apple, "POST", "apple/receipts", json: ["receipt-data": receipt, "status": 21010])  // invalid: no effect, no retry
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: appleConfiguration(), http: http))
        var encryptedRegistry = registry
        encryptedRegistry.personalArgumentsOpener = opener
        func drive(_ registry: JobRegistry, sealing: Bool) throws -> Double {
            let driver = fixture.driver(registry)
            var payloads: [JobPayload] = []
            for index in 0..<jobs {
                var job = try NewJob(ValidateReceiptArguments(userID: users[index % users.count], appID: db.appID, planID: db.planID,
                                                              proof: .apple(receiptData: receipt, transactionID: "\(9_000_000 + index)",
                                                                            originalTransactionID: nil, signedTransaction: nil)))
                if sealing { job = try sealer.sealed(job) }
                payloads.append(try JobClient.payload(for: job, createdAt: Clock.now(), enqueuedAt: Clock.now()))
            }
            let started = Date()
            for payload in payloads { _ = try driver.deliver(payload) }
            return Date().timeIntervalSince(started) * 1e3 / Double(jobs)
        }
        _ = try drive(registry, sealing: false)  // warm-up (connections, fake)
        let plainJob = try drive(registry, sealing: false)
        let encryptedJob = try drive(encryptedRegistry, sealing: true)
        print("subject-keys-bench: ValidateReceiptJob real path (runner, Apple fake, PostgreSQL): clear "
              + String(format: "%.3f", plainJob) + " ms per job, encrypted " + String(format: "%.3f", encryptedJob)
              + " ms per job (" + String(format: "%+.1f", (encryptedJob / plainJob - 1) * 100) + " %)")
    }
}

/// The producer of bench/subject_keys.sh's release drain (not what it measures): pushes `SealedProbe` jobs into
/// `queue:default` of `REDIS_URL`, one per subject (`SUBJECT_KEYS_BENCH_SUBJECTS`, default 10,000, fixed user ids so
/// every fill of a run uses the same subjects), each with a 4 KB `receipt`, `SUBJECT_KEYS_BENCH_PASSES` times over the
/// subjects (default 1), in pipelined batches of 1,000 through `JobClient`: sealed by a `SubjectArgumentsSealer` over
/// the key store in `DATABASE_URL` under `SUBJECT_KEYS_BENCH_KEK` (the worker's `WORKERS_KEK`) when
/// `SUBJECT_KEYS_BENCH_FILL=sealed`, in clear when `clear`. Skipped unless `SUBJECT_KEYS_BENCH_FILL` is set.
final class SubjectKeysBenchFillTests: XCTestCase {
    /// `SealedProbe`'s declarations (Sources/BenchJobs/SealedProbeJob.swift; JobsTests does not link BenchJobs):
    /// what the sealer needs. A drift shows in the bench as dead jobs, which bench/subject_keys.sh refuses.
    struct SealedProbeArguments: JobArguments {
        static let className = "SealedProbe"
        static let personalFields: Set<String> = ["receipt"]
        static let subjectField: String? = "user_id"
        let userID: String
        let receipt: String
        let n: Int
        enum CodingKeys: String, CodingKey { case userID = "user_id", receipt, n }
    }

    func testFill() throws {
        let env = ProcessInfo.processInfo.environment
        guard let mode = env["SUBJECT_KEYS_BENCH_FILL"] else { throw XCTSkip("set SUBJECT_KEYS_BENCH_FILL=sealed|clear (bench/subject_keys.sh)") }
        XCTAssert(["sealed", "clear"].contains(mode), "SUBJECT_KEYS_BENCH_FILL must be sealed or clear, got \(mode)")
        let subjects = Int(env["SUBJECT_KEYS_BENCH_SUBJECTS"] ?? "") ?? 10_000
        let passes = Int(env["SUBJECT_KEYS_BENCH_PASSES"] ?? "") ?? 1
        let redis = try RedisPool(url: try XCTUnwrap(env["REDIS_URL"], "REDIS_URL"), maxConnections: 1)
        var middleware: [any EnqueueMiddleware] = []
        if mode == "sealed" {
            let kek = try KeyEncryptionKey(parsing: try XCTUnwrap(env["SUBJECT_KEYS_BENCH_KEK"], "SUBJECT_KEYS_BENCH_KEK"))
            let store = try SubjectKeyStore(pool: PostgresPool(url: try XCTUnwrap(env["DATABASE_URL"], "DATABASE_URL"), maxConnections: 1),
                                            current: kek)
            middleware = [SubjectArgumentsSealer(store: store, classes: [SealedProbeArguments.self], cacheTTL: .seconds(3600))]
        }
        let client = JobClient(pool: redis, middleware: middleware)
        let receipt = String(repeating: "MIIT", count: 1024)  // 4 KB
        let started = Date()
        for _ in 0..<passes {
            for first in stride(from: 0, to: subjects, by: 1000) {
                let jobs = try (first..<min(subjects, first + 1000)).map { index in
                    try NewJob(SealedProbeArguments(userID: String(format: "00000000-0000-4000-8000-%012d", index),
                                                    receipt: receipt, n: index))
                }
                try client.enqueueMany(jobs)
            }
        }
        print("subject-keys-bench-fill: \(passes * subjects) SealedProbe jobs \(mode) in "
              + String(format: "%.1f", Date().timeIntervalSince(started)) + " s")
    }
}
