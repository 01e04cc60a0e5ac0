// swift-tools-version:6.0
import PackageDescription

// Every module, product and module-map name SwiftWorkers used before issue 53 gave them a prefix, declared by another
// package, as an adopter's graph may hold them (hummingbird's swift-jobs declares `Jobs`). Examples/AppService depends
// on these products beside SwiftWorkers' and imports each (NameStandInUser): if a name of ours clashes again, SwiftPM
// refuses the graph ("multiple packages declare targets with a conflicting name") and scripts/test fails.
let swiftNames = ["Jobs", "Queue", "HTTP", "Storage", "Mail", "Telemetry", "Scheduler", "Boundary", "CivilDate", "TestSupport", "Outbox", "SubjectKeys", "BenchJobs", "WebDashboard", "FuzzTargets"]
let cNames = ["CHiredis", "CLibPQ", "CCurl"]
let package = Package(
    name: "NameStandIn",
    products: swiftNames.map { Product.library(name: $0, targets: [$0]) }
        + [.library(name: "CModules", targets: ["CModules"]), .executable(name: "FuzzRunner", targets: ["FuzzRunner"])],
    targets: swiftNames.map { Target.target(name: $0) }
        + cNames.map { Target.systemLibrary(name: $0) }
        // The C module maps reach a graph through a Swift target that imports them.
        + [.target(name: "CModules", dependencies: cNames.map { .target(name: $0) }), .executableTarget(name: "FuzzRunner")]
)
