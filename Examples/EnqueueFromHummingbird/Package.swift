// swift-tools-version:6.0
import PackageDescription

// A Hummingbird 2 service that enqueues jobs through the WorkersClient library product of the
// root package (no worker runtime linked). Built by scripts/test, so CI keeps it compiling.
let package = Package(
    name: "EnqueueFromHummingbird",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "SwiftWorkers", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
    ],
    targets: [
        .executableTarget(name: "EnqueueFromHummingbird", dependencies: [
            .product(name: "WorkersClient", package: "SwiftWorkers"),
            .product(name: "Hummingbird", package: "hummingbird"),
        ]),
    ]
)
