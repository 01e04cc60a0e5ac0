// swift-tools-version:6.0
import PackageDescription

// Floors: a target imports only targets on a lower floor (never its own, never one above). This table is the layer
// map, machine-readable: scripts/check-floors (run first by scripts/test) reads it with every `import` in Sources/ and
// Tests/, and fails on an import at or above the importer's floor, on a target missing here, and on a dependency
// declared below that no file of its target imports. SwiftPM itself does not read this table. Every target is
// listed, test targets too (floor 6: nothing may import them).
let floors: [String: Int] = [
    // 6: the test targets
    "QueueTests": 6, "StorageTests": 6, "HTTPTests": 6, "WorkersTests": 6, "SchedulerTests": 6, "JobsTests": 6,
    "WorkerctlTests": 6, "WorkersClientTests": 6, "WebDashboardTests": 6, "FuzzTests": 6, "OutboxTests": 6,
    "MailTests": 6,
    // 5: binaries
    "workerctl": 5,               // the operator's binary
    "WorkersFuzzRunner": 5,       // replays fuzz corpora through FuzzTargets, or is the libFuzzer binary (bench/fuzz.sh)
    // 4: what is built on the runtime, the client and the scheduler
    "WorkersAppJobs": 4,          // the domain jobs + registry
    "WorkersBenchJobs": 4,        // bench/test-only jobs and tables (ProbeInsert, probe_rows); registered only on request
    "WorkersWebDashboard": 4,     // `workerctl web`: HTML pages over the Queue admin API and Scheduler's cron store
    "WorkersFuzzTargets": 4,      // fuzz harnesses, one per parser of outside input (docs/fuzzing.md)
    "WorkersTestSupport": 4,      // tests' fast in-process worker configuration
    // 3: runtime, client, outbox, cron, mail
    "Workers": 3,                 // runtime (pool, fetch, retry, heartbeat)
    "WorkersClient": 3,           // library product for services: async pooled enqueue + admin over Queue
    "WorkersOutbox": 3,           // transactional enqueue through PostgreSQL (job_outbox), its relay to Redis
    "WorkersScheduler": 3,        // cron
    "WorkersSubjectKeys": 3,      // per-subject data keys in PostgreSQL, encrypted personal job arguments (docs/jobs-privacy.md)
    "WorkersMail": 3,             // SMTP sender and RFC 5322 messages, over HTTP's curl runtime
    "WorkersTestServices": 3,     // tests' service URLs, fake external servers, process helpers
    // 2: wire protocols
    "WorkersQueue": 2,            // Sidekiq's wire format and key layout over hiredis
    "WorkersStorage": 2,          // PostgreSQL over libpq
    "WorkersHTTP": 2,             // libcurl HTTP client (and the curl runtime Mail sends through)
    // 1: no project dependencies
    "CWorkersHiredis": 1, "CWorkersLibPQ": 1, "CWorkersCurl": 1,  // system-library shims
    "CWorkersOpenSSL": 1,         // OpenSSL's libssl for TLS links to Redis (hiredis 0.14 has no TLS of its own)
    "WorkersCivilDate": 1,        // calendar arithmetic
    "WorkersBoundary": 1,         // Bounded: outside numbers clamped or refused, never a trap; ContentHash (SHA-1/256)
    "WorkersTelemetry": 1,        // the tracing switch, W3C context, OTLP tracer and batcher (docs/tracing.md)
]

// Debian's hiredis.pc adds `-D_FILE_OFFSET_BITS=64`, which SwiftPM drops with a warning printed into every adopter's
// build (scripts/check-producer-weight fails on it). On Linux the headers sit in the compiler's default path
// (`<hiredis/hiredis.h>`, which includes its siblings by relative name), so pkg-config is asked only elsewhere
// (macOS: Homebrew's prefix).
#if os(Linux)
let hiredisPkgConfig: String? = nil
#else
let hiredisPkgConfig: String? = "hiredis"
#endif

let package = Package(
    name: "SwiftWorkers",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "workerctl", targets: ["workerctl"]),
        // For Swift services (Vapor, Hummingbird): enqueue and admin, async, pooled; no worker runtime.
        // See Examples/AppService (EnqueueFromHummingbird).
        .library(name: "WorkersClient", targets: ["WorkersClient"]),
        // For Swift services that run their own jobs: the worker runtime (Job, JobRegistry, WorkerProcess), run
        // under a ServiceGroup (docs/embedding.md). See Examples/AppService (AppWorker).
        .library(name: "Workers", targets: ["Workers"]),
        // For services that enqueue inside their PostgreSQL transaction (docs/outbox.md).
        .library(name: "WorkersOutbox", targets: ["WorkersOutbox"]),
        // For Swift services that enqueue jobs with personal arguments: the sealer (docs/jobs-privacy.md).
        .library(name: "WorkersSubjectKeys", targets: ["WorkersSubjectKeys"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.1"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // The HTTP server of `workerctl web` (docs/web.md); also used by Examples/AppService.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        // Service conformances of WorkerProcess and WorkersClient (docs/embedding.md); Hummingbird depends on it too.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        .systemLibrary(name: "CWorkersHiredis", path: "Sources/CHiredis", pkgConfig: hiredisPkgConfig,
                       providers: [.apt(["libhiredis-dev"])]),
        .systemLibrary(name: "CWorkersLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq",
                       providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CWorkersOpenSSL", path: "Sources/CWorkersOpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CWorkersCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),

        // Proleptic Gregorian day arithmetic shared by Storage (timestamps) and Scheduler (cron).
        .target(name: "WorkersCivilDate"),
        // The one way a number from outside (payload, header, URL, query string, config) becomes a runtime number:
        // clamped or refused, never a trap (docs/hostile-input.md); and ContentHash, the SHA-1/SHA-256 Queue and Storage
        // name scripts, unique locks and migration files by (no crypto library for them). No dependencies; re-exported
        // by Queue.
        .target(name: "WorkersBoundary"),

        // Tracing (docs/tracing.md): off unless bootstrapped; the OTLP/HTTP transport lives in HTTP.
        .target(name: "WorkersTelemetry", dependencies: [.product(name: "Tracing", package: "swift-distributed-tracing")]),

        .target(name: "WorkersQueue", dependencies: ["WorkersBoundary", "CWorkersHiredis", "CWorkersOpenSSL", "WorkersTelemetry", .product(name: "Tracing", package: "swift-distributed-tracing")]),
        .target(name: "WorkersStorage", dependencies: ["WorkersBoundary", "CWorkersLibPQ", "WorkersCivilDate", "WorkersTelemetry", .product(name: "Tracing", package: "swift-distributed-tracing"), .product(name: "Logging", package: "swift-log")],
                resources: [.copy("Migrations"), .copy("WorkersMigrations")]),
        .target(name: "WorkersHTTP", dependencies: ["WorkersBoundary", "CWorkersCurl", "WorkersTelemetry", .product(name: "Tracing", package: "swift-distributed-tracing"), .product(name: "Logging", package: "swift-log")]),

        // SMTP (the privacy export mail, docs/jobs-privacy.md): libcurl's SMTP client through HTTP's curl runtime
        // (CurlRuntime, CurlTransferState, CurlFailure: `package` in HTTP).
        .target(name: "WorkersMail", dependencies: ["WorkersHTTP", "CWorkersCurl", .product(name: "Logging", package: "swift-log")]),

        .target(name: "WorkersClient", dependencies: ["WorkersQueue", "WorkersTelemetry", .product(name: "Tracing", package: "swift-distributed-tracing"),
                                                      .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),

        // Transactional enqueue through PostgreSQL (job_outbox), its relay to Redis and the lost-job finder
        // (docs/outbox.md). Needs both Queue and Storage, so it is not part of the Redis-only WorkersClient.
        .target(name: "WorkersOutbox", dependencies: ["WorkersQueue", "WorkersStorage", .product(name: "Logging", package: "swift-log")]),

        .target(name: "Workers", dependencies: ["WorkersQueue", "WorkersStorage", "WorkersTelemetry", .product(name: "Tracing", package: "swift-distributed-tracing"), .product(name: "Logging", package: "swift-log"),
                                                .product(name: "CoreMetrics", package: "swift-metrics"),
                                                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        // Crypto-shredding of personal job arguments (docs/jobs-privacy.md, issue 37): per-subject AES-256-GCM data
        // keys wrapped by a KEK in PostgreSQL, the enqueue middleware that seals and the opener the worker calls.
        .target(name: "WorkersSubjectKeys", dependencies: ["WorkersQueue", "WorkersStorage", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "WorkersScheduler", dependencies: ["WorkersQueue", "WorkersCivilDate", "Yams", .product(name: "Logging", package: "swift-log"),
                                                  .product(name: "CoreMetrics", package: "swift-metrics")]),

        .target(name: "WorkersAppJobs", dependencies: ["Workers", "WorkersQueue", "WorkersStorage", "WorkersHTTP", "WorkersMail", "WorkersSubjectKeys",
                                             .product(name: "Logging", package: "swift-log"),
                                             .product(name: "Crypto", package: "swift-crypto"),
                                             .product(name: "_CryptoExtras", package: "swift-crypto"),
                                             .product(name: "X509", package: "swift-certificates"),
                                             .product(name: "CoreMetrics", package: "swift-metrics")]),

        // Bench and test fixtures (ProbeInsert, probe_rows), out of the production registry and schema:
        // `workerctl worker --bench-jobs` / `workerctl migrate --bench-tables` and the tests ask for them.
        .target(name: "WorkersBenchJobs", dependencies: ["Workers", "WorkersStorage", "WorkersHTTP", "WorkersQueue"]),

        // The operator web dashboard (`workerctl web`, docs/web.md): HTML pages over the Queue admin API, run on
        // WorkersClient's threads; HTTP, HTML escaping and the CSRF/credential checks are all it adds.
        .target(name: "WorkersWebDashboard", dependencies: ["WorkersQueue", "WorkersScheduler", "WorkersClient", "WorkersOutbox", "WorkersStorage",
                                                     .product(name: "Hummingbird", package: "hummingbird"),
                                                     .product(name: "Logging", package: "swift-log")]),

        // Fuzz harnesses (docs/fuzzing.md): one entry point per parser of outside input, none may trap. FuzzRunner
        // replays corpus files through them (Tests/FuzzTests), or, built by bench/fuzz.sh with -DFUZZING and
        // -sanitize=fuzzer, is the libFuzzer binary.
        .target(name: "WorkersFuzzTargets", dependencies: ["WorkersQueue", "WorkersScheduler", "WorkersHTTP", "WorkersStorage", "Workers"]),
        .executableTarget(name: "WorkersFuzzRunner", dependencies: ["WorkersFuzzTargets"]),

        .executableTarget(name: "workerctl", dependencies: [
            "WorkersWebDashboard", "WorkersAppJobs", "WorkersBenchJobs", "Workers", "WorkersScheduler", "WorkersQueue", "WorkersStorage", "WorkersHTTP", "WorkersOutbox", "WorkersTelemetry", "WorkersSubjectKeys", .product(name: "Tracing", package: "swift-distributed-tracing"), 
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            "Yams",
        ]),

        // Shared by the test targets only: service URLs, fake external servers, process helpers.
        .target(name: "WorkersTestServices", dependencies: ["WorkersQueue", "WorkersStorage"], path: "Tests/TestSupport"),

        .testTarget(name: "QueueTests", dependencies: ["WorkersQueue", "WorkersTestServices"]),
        .testTarget(name: "StorageTests", dependencies: ["WorkersStorage", "WorkersCivilDate", "WorkersTestServices"]),
        .testTarget(name: "HTTPTests", dependencies: ["WorkersHTTP", "WorkersTelemetry", "WorkersTestServices"]),
        .testTarget(name: "MailTests", dependencies: ["WorkersMail", "WorkersTestServices"]),
        // Shared by the test targets that run in-process workers: the fast test configuration.
        .target(name: "WorkersTestSupport", dependencies: ["Workers", "WorkersTestServices"], path: "Tests/WorkersTestSupport"),

        .testTarget(name: "WorkersTests", dependencies: ["WorkersTestSupport", "Workers", "WorkersBenchJobs", "WorkersQueue", "WorkersStorage", "WorkersTestServices",
                                                         .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        .testTarget(name: "SchedulerTests", dependencies: ["WorkersScheduler", "WorkersQueue", "WorkersTestServices"]),
        .testTarget(name: "JobsTests", dependencies: ["WorkersTestSupport", "WorkersAppJobs", "Workers", "WorkersClient", "WorkersQueue", "WorkersStorage", "WorkersHTTP", "WorkersMail", "WorkersTestServices", "WorkersOutbox", "WorkersSubjectKeys", "WorkersScheduler", "WorkersBenchJobs", "WorkersWebDashboard",
                                                      .product(name: "Crypto", package: "swift-crypto"),
                                                      .product(name: "_CryptoExtras", package: "swift-crypto"),
                                                      .product(name: "X509", package: "swift-certificates"),
                                                      .product(name: "SwiftASN1", package: "swift-asn1")]),
        .testTarget(name: "WorkerctlTests", dependencies: ["WorkersQueue", "WorkersStorage", "WorkersTestServices"]),
        .testTarget(name: "WorkersClientTests", dependencies: ["WorkersClient", "WorkersQueue", "WorkersTestServices",
                                                               .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        // Drives a real `workerctl web` process (and headless Chromium): it imports nothing from WebDashboard.
        .testTarget(name: "WebDashboardTests", dependencies: ["WorkersQueue", "WorkersScheduler", "WorkersStorage", "WorkersTestServices"]),
        // Replays Tests/FuzzCorpus/<harness>/* through the FuzzRunner binary (built by `swift build --build-tests`).
        .testTarget(name: "FuzzTests", dependencies: ["WorkersFuzzTargets"]),
        .testTarget(name: "OutboxTests", dependencies: ["WorkersOutbox", "WorkersBenchJobs", "WorkersQueue", "WorkersStorage", "WorkersTestServices"]),
    ]
)

// Target names carry our prefix (`Workers…`, `CWorkers…`, or `workerctl`) so that none joins an adopter's package graph
// under a name another package uses (hummingbird's swift-jobs has `Jobs`; issue 53). Folders keep their short names:
// this table maps each renamed target to its folder. scripts/check-floors fails on a non-test target without the
// prefix. (Test targets of a dependency never enter an adopter's graph, so they keep their names.)
let folders: [String: String] = [
    "WorkersCivilDate": "Sources/CivilDate", "WorkersBoundary": "Sources/Boundary", "WorkersTelemetry": "Sources/Telemetry",
    "WorkersQueue": "Sources/Queue", "WorkersStorage": "Sources/Storage", "WorkersHTTP": "Sources/HTTP",
    "WorkersMail": "Sources/Mail", "WorkersOutbox": "Sources/Outbox", "WorkersSubjectKeys": "Sources/SubjectKeys",
    "WorkersScheduler": "Sources/Scheduler", "WorkersAppJobs": "Sources/Jobs", "WorkersBenchJobs": "Sources/BenchJobs",
    "WorkersWebDashboard": "Sources/WebDashboard", "WorkersFuzzTargets": "Sources/FuzzTargets",
    "WorkersFuzzRunner": "Sources/FuzzRunner",
]
for target in package.targets {
    if let folder = folders[target.name] { target.path = folder }
}

// Upcoming language features, as swift-jobs builds (issue 35): existential types spelled `any P`, and a member
// visible only where its module is imported by the file that uses it.
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [
        .enableUpcomingFeature("ExistentialAny"),
        .enableUpcomingFeature("MemberImportVisibility"),
    ]
}
