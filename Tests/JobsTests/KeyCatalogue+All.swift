import WorkersBenchJobs
import WorkersAppJobs
import WorkersQueue
import WorkersScheduler
import WorkersSubjectKeys

/// Every key pattern the project's key types can build: the union of each module's catalogue (Queue's
/// `QueueKeyCatalogue.all`, Scheduler's `CronKeys.catalogue`, `ErasureKeys.catalogue`, Jobs' `GeoKeys.catalogue`,
/// BenchJobs' `BenchKeys.catalogue`). Here, in the lowest target that sees all five (Jobs and BenchJobs share floor 4,
/// so no module can). A key outside it fails `KeyCatalogueTests`; a state fuzzer writes at each of them.
enum KeyCatalogue {
    static let all: [KeyPattern] = QueueKeyCatalogue.all + CronKeys.catalogue + ErasureKeys.catalogue
        + GeoKeys.catalogue + BenchKeys.catalogue
}
