// swift-tools-version:6.0
import PackageDescription

// A producer and nothing else: a service that only enqueues depends on the WorkersClient product alone (by path, as
// an adopter depends by version). scripts/check-producer-weight builds it from nothing and fails if the build
// compiled swift-crypto, NIO or Hummingbird, or if SwiftWorkers' own targets printed a warning (issue 53, point 6).
let package = Package(
    name: "ProducerOnly",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "SwiftWorkers", path: "../.."),
    ],
    targets: [
        .executableTarget(name: "ProducerOnly", dependencies: [
            .product(name: "WorkersClient", package: "SwiftWorkers"),
        ]),
    ]
)
