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
    "workerctl": 5,           // the operator's binary
    "FuzzRunner": 5,          // replays fuzz corpora through FuzzTargets, or is the libFuzzer binary (bench/fuzz.sh)
    // 4: what is built on the runtime, the client and the scheduler
    "Jobs": 4,                // the domain jobs + registry
    "BenchJobs": 4,           // bench/test-only jobs and tables (ProbeInsert, probe_rows); registered only on request
    "WebDashboard": 4,        // `workerctl web`: HTML pages over the Queue admin API and Scheduler's cron store
    "FuzzTargets": 4,         // fuzz harnesses, one per parser of outside input (docs/fuzzing.md)
    "WorkersTestSupport": 4,  // tests' fast in-process worker configuration
    // 3: runtime, client, outbox, cron, mail
    "Workers": 3,             // runtime (pool, fetch, retry, heartbeat)
    "WorkersClient": 3,       // library product for services: async pooled enqueue + admin over Queue
    "Outbox": 3,              // transactional enqueue through PostgreSQL (job_outbox), its relay to Redis
    "Scheduler": 3,           // cron
    "SubjectKeys": 3,         // per-subject data keys in PostgreSQL, encrypted personal job arguments (docs/jobs-privacy.md)
    "Mail": 3,                // SMTP sender and RFC 5322 messages, over HTTP's curl runtime
    "TestSupport": 3,         // tests' service URLs, fake external servers, process helpers
    // 2: wire protocols
    "Queue": 2,               // Sidekiq's wire format and key layout over hiredis
    "Storage": 2,             // PostgreSQL over libpq
    "HTTP": 2,                // libcurl HTTP client (and the curl runtime Mail sends through)
    // 1: no project dependencies
    "CHiredis": 1, "CLibPQ": 1, "CCurl": 1,  // system-library shims
    "CWorkersOpenSSL": 1,     // OpenSSL's libssl for TLS links to Redis (hiredis 0.14 has no TLS of its own)
    "CivilDate": 1,           // calendar arithmetic
    "Boundary": 1,            // Bounded: outside numbers clamped or refused, never a trap; ContentHash (SHA-1/256)
    "Telemetry": 1,           // the tracing switch, W3C context, OTLP tracer and batcher (docs/tracing.md)
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
        .library(name: "Outbox", targets: ["Outbox"]),
        // For Swift services that enqueue jobs with personal arguments: the sealer (docs/jobs-privacy.md).
        .library(name: "SubjectKeys", targets: ["SubjectKeys"]),
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
        .systemLibrary(name: "CHiredis", path: "Sources/CHiredis", pkgConfig: hiredisPkgConfig,
                       providers: [.apt(["libhiredis-dev"])]),
        .systemLibrary(name: "CLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq",
                       providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CWorkersOpenSSL", path: "Sources/CWorkersOpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),

        // Proleptic Gregorian day arithmetic shared by Storage (timestamps) and Scheduler (cron).
        .target(name: "CivilDate"),
        // The one way a number from outside (payload, header, URL, query string, config) becomes a runtime number:
        // clamped or refused, never a trap (docs/hostile-input.md); and ContentHash, the SHA-1/SHA-256 Queue and Storage
        // name scripts, unique locks and migration files by (no crypto library for them). No dependencies; re-exported
        // by Queue.
        .target(name: "Boundary"),

        // Tracing (docs/tracing.md): off unless bootstrapped; the OTLP/HTTP transport lives in HTTP.
        .target(name: "Telemetry", dependencies: [.product(name: "Tracing", package: "swift-distributed-tracing")]),

        .target(name: "Queue", dependencies: ["Boundary", "CHiredis", "CWorkersOpenSSL", "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing")]),
        .target(name: "Storage", dependencies: ["Boundary", "CLibPQ", "CivilDate", "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"), .product(name: "Logging", package: "swift-log")],
                resources: [.copy("Migrations"), .copy("WorkersMigrations")]),
        .target(name: "HTTP", dependencies: ["Boundary", "CCurl", "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"), .product(name: "Logging", package: "swift-log")]),

        // SMTP (the privacy export mail, docs/jobs-privacy.md): libcurl's SMTP client through HTTP's curl runtime
        // (CurlRuntime, CurlTransferState, CurlFailure: `package` in HTTP).
        .target(name: "Mail", dependencies: ["HTTP", "CCurl", .product(name: "Logging", package: "swift-log")]),

        .target(name: "WorkersClient", dependencies: ["Queue", "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"),
                                                      .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),

        // Transactional enqueue through PostgreSQL (job_outbox), its relay to Redis and the lost-job finder
        // (docs/outbox.md). Needs both Queue and Storage, so it is not part of the Redis-only WorkersClient.
        .target(name: "Outbox", dependencies: ["Queue", "Storage", .product(name: "Logging", package: "swift-log")]),

        .target(name: "Workers", dependencies: ["Queue", "Storage", "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"), .product(name: "Logging", package: "swift-log"),
                                                .product(name: "CoreMetrics", package: "swift-metrics"),
                                                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        // Crypto-shredding of personal job arguments (docs/jobs-privacy.md, issue 37): per-subject AES-256-GCM data
        // keys wrapped by a KEK in PostgreSQL, the enqueue middleware that seals and the opener the worker calls.
        .target(name: "SubjectKeys", dependencies: ["Queue", "Storage", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "Scheduler", dependencies: ["Queue", "CivilDate", "Yams", .product(name: "Logging", package: "swift-log"),
                                                  .product(name: "CoreMetrics", package: "swift-metrics")]),

        .target(name: "Jobs", dependencies: ["Workers", "Queue", "Storage", "HTTP", "Mail", "SubjectKeys",
                                             .product(name: "Logging", package: "swift-log"),
                                             .product(name: "Crypto", package: "swift-crypto"),
                                             .product(name: "_CryptoExtras", package: "swift-crypto"),
                                             .product(name: "X509", package: "swift-certificates"),
                                             .product(name: "CoreMetrics", package: "swift-metrics")]),

        // Bench and test fixtures (ProbeInsert, probe_rows), out of the production registry and schema:
        // `workerctl worker --bench-jobs` / `workerctl migrate --bench-tables` and the tests ask for them.
        .target(name: "BenchJobs", dependencies: ["Workers", "Storage", "HTTP", "Queue"]),

        // The operator web dashboard (`workerctl web`, docs/web.md): HTML pages over the Queue admin API, run on
        // WorkersClient's threads; HTTP, HTML escaping and the CSRF/credential checks are all it adds.
        .target(name: "WebDashboard", dependencies: ["Queue", "Scheduler", "WorkersClient", "Outbox", "Storage",
                                                     .product(name: "Hummingbird", package: "hummingbird"),
                                                     .product(name: "Logging", package: "swift-log")]),

        // Fuzz harnesses (docs/fuzzing.md): one entry point per parser of outside input, none may trap. FuzzRunner
        // replays corpus files through them (Tests/FuzzTests), or, built by bench/fuzz.sh with -DFUZZING and
        // -sanitize=fuzzer, is the libFuzzer binary.
        .target(name: "FuzzTargets", dependencies: ["Queue", "Scheduler", "HTTP", "Storage", "Workers"]),
        .executableTarget(name: "FuzzRunner", dependencies: ["FuzzTargets"]),

        .executableTarget(name: "workerctl", dependencies: [
            "WebDashboard", "Jobs", "BenchJobs", "Workers", "Scheduler", "Queue", "Storage", "HTTP", "Outbox", "Telemetry", "SubjectKeys", .product(name: "Tracing", package: "swift-distributed-tracing"), 
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            "Yams",
        ]),

        // Shared by the test targets only: service URLs, fake external servers, process helpers.
        .target(name: "TestSupport", dependencies: ["Queue", "Storage"], path: "Tests/TestSupport"),

        .testTarget(name: "QueueTests", dependencies: ["Queue", "TestSupport"]),
        .testTarget(name: "StorageTests", dependencies: ["Storage", "CivilDate", "TestSupport"]),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "Telemetry", "TestSupport"]),
        .testTarget(name: "MailTests", dependencies: ["Mail", "TestSupport"]),
        // Shared by the test targets that run in-process workers: the fast test configuration.
        .target(name: "WorkersTestSupport", dependencies: ["Workers", "TestSupport"], path: "Tests/WorkersTestSupport"),

        .testTarget(name: "WorkersTests", dependencies: ["WorkersTestSupport", "Workers", "BenchJobs", "Queue", "Storage", "TestSupport",
                                                         .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        .testTarget(name: "SchedulerTests", dependencies: ["Scheduler", "Queue", "TestSupport"]),
        .testTarget(name: "JobsTests", dependencies: ["WorkersTestSupport", "Jobs", "Workers", "WorkersClient", "Queue", "Storage", "HTTP", "Mail", "TestSupport", "Outbox", "SubjectKeys", "Scheduler", "BenchJobs", "WebDashboard",
                                                      .product(name: "Crypto", package: "swift-crypto"),
                                                      .product(name: "_CryptoExtras", package: "swift-crypto"),
                                                      .product(name: "X509", package: "swift-certificates"),
                                                      .product(name: "SwiftASN1", package: "swift-asn1")]),
        .testTarget(name: "WorkerctlTests", dependencies: ["Queue", "Storage", "TestSupport"]),
        .testTarget(name: "WorkersClientTests", dependencies: ["WorkersClient", "Queue", "TestSupport",
                                                               .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        // Drives a real `workerctl web` process (and headless Chromium): it imports nothing from WebDashboard.
        .testTarget(name: "WebDashboardTests", dependencies: ["Queue", "Scheduler", "Storage", "TestSupport"]),
        // Replays Tests/FuzzCorpus/<harness>/* through the FuzzRunner binary (built by `swift build --build-tests`).
        .testTarget(name: "FuzzTests", dependencies: ["FuzzTargets"]),
        .testTarget(name: "OutboxTests", dependencies: ["Outbox", "BenchJobs", "Queue", "Storage", "TestSupport"]),
    ]
)

// Upcoming language features, as swift-jobs builds (issue 35): existential types spelled `any P`, and a member
// visible only where its module is imported by the file that uses it.
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [
        .enableUpcomingFeature("ExistentialAny"),
        .enableUpcomingFeature("MemberImportVisibility"),
    ]
}
