// swift-tools-version:6.0
import PackageDescription

// Transactional enqueue through a PostgresNIO connection (docs/outbox.md, "From a PostgresNIO / Fluent service"):
// a package of its own so that the root package, and every producer that does not ask for it, never compiles
// postgres-nio (issue 53 point 4). It writes the same job_outbox row as WorkersOutbox's `Outbox.enqueue`, through
// the same preparation (WorkersQueue's `OutboxEnqueueCall`, exported by the WorkersClient product) and the same SQL
// function `workers_enqueue`.
let package = Package(
    name: "WorkersPostgresNIO",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "WorkersPostgresNIO", targets: ["WorkersPostgresNIO"]),
    ],
    dependencies: [
        .package(name: "SwiftWorkers", path: "../.."),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .target(name: "WorkersPostgresNIO", dependencies: [
            .product(name: "WorkersClient", package: "SwiftWorkers"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Against the PostgreSQL of scripts/services, migrated by the root's `workerctl migrate`; WorkersOutbox (libpq)
        // only here, to compare the row and the refusal with `Outbox.enqueue`'s.
        .testTarget(name: "WorkersPostgresNIOTests", dependencies: [
            "WorkersPostgresNIO",
            .product(name: "WorkersOutbox", package: "SwiftWorkers"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
        ]),
    ]
)
