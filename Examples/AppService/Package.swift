// swift-tools-version:6.0
import PackageDescription

// A service of its own that uses the root package's library products (by path), built by scripts/test so CI keeps
// it compiling; one package for all of them, so CI builds Hummingbird and the root package once:
// - EnqueueFromHummingbird: a Hummingbird 2 service that enqueues through WorkersClient (no worker runtime linked);
// - AppWorker: two jobs of the service's own, enqueued typed and run in its own process by the Workers product under
//   a ServiceGroup (swift-service-lifecycle), with /metrics, /healthz and /readyz. scripts/test runs its demo;
// - OutboxExample: docs/outbox.md's Swift example, compiled against the WorkersOutbox product.
let package = Package(
    name: "AppService",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "SwiftWorkers", path: "../.."),
        // Every name SwiftWorkers used before its prefix (issue 53): the graph must hold both packages.
        .package(path: "../NameStandIn"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
    ],
    targets: [
        .executableTarget(name: "EnqueueFromHummingbird", dependencies: [
            .product(name: "WorkersClient", package: "SwiftWorkers"),
            .product(name: "Hummingbird", package: "hummingbird"),
        ]),
        .executableTarget(name: "AppWorker", dependencies: [
            .product(name: "Workers", package: "SwiftWorkers"),
            .product(name: "WorkersClient", package: "SwiftWorkers"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ]),
        // docs/outbox.md's Swift example against the WorkersOutbox product alone: compiled, not run.
        .target(name: "OutboxExample", dependencies: [.product(name: "WorkersOutbox", package: "SwiftWorkers")]),
        // Compiled, not run: README.md's snippets marked `<!-- compiled -->` (scripts/readme-snippets copies them here).
        .target(name: "ReadmeSnippets", dependencies: [
            .product(name: "Workers", package: "SwiftWorkers"),
            .product(name: "WorkersClient", package: "SwiftWorkers"),
            .product(name: "WorkersOutbox", package: "SwiftWorkers"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Compiled, not run: the stand-in modules and SwiftWorkers' products in one module (no name clashes).
        .target(name: "NameStandInUser", dependencies: [
            .product(name: "Workers", package: "SwiftWorkers"),
            .product(name: "WorkersClient", package: "SwiftWorkers"),
            .product(name: "WorkersOutbox", package: "SwiftWorkers"),
            .product(name: "WorkersSubjectKeys", package: "SwiftWorkers"),
            .product(name: "CModules", package: "NameStandIn"),
        ] + ["Jobs", "Queue", "HTTP", "Storage", "Mail", "Telemetry", "Scheduler", "Boundary", "CivilDate", "TestSupport",
             "Outbox", "SubjectKeys", "BenchJobs", "WebDashboard", "FuzzTargets"].map { .product(name: $0, package: "NameStandIn") }),
    ]
)
