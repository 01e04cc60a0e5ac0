import Foundation
import WorkersQueue
import Workers

/// The fleet-wide cap on concurrent store calls (docs/limiters.md, docs/jobs-receipts.md): at most
/// `maxConcurrent` receipt jobs talk to one store at once, across every worker process. Each of these jobs
/// sends its store requests one after another, so N jobs inside the limit means at most N requests in flight
/// to that store, however many requests one run sends.
///
/// Key `limit:store-calls:apple` / `limit:store-calls:google`. Over the cap a job is rescheduled (not a
/// failure) after `1 + overrated` seconds (at most 30) plus up to one second of jitter: a purchase waits
/// seconds, not Sidekiq Enterprise's five-minute steps; after 20 reschedules it fails and retries normally.
enum StoreCallLimits {
    static let name = "store-calls"
    static let maxConcurrent = 20
    /// Renewed every 20 s while the job runs; a killed process's slots come back within a minute.
    static let lease: Duration = .seconds(60)

    static let overLimit = OverLimitPolicy(reschedule: 20) { overrated, _ in
        .seconds(min(30, 1 + Double(overrated)) + Double.random(in: 0...1))
    }

    /// A job class's options with the cap on `store` (a fixed store) or on the typed arguments' store
    /// (`ValidateReceiptArguments.store`, i.e. `args[0].store`).
    static func options(_ base: JobOptions, store: String? = nil) -> JobOptions {
        var options = base
        // `args[0].store` read as it travels: the typed arguments do not decode before the worker opens the
        // encrypted personal fields (docs/jobs-privacy.md), and `store` is not one of them.
        let declaration = LimitDeclaration.concurrent(name, max: maxConcurrent, lease: lease, key: { args in
            if let store { return store }
            guard args.count == 1, let value = args[0].objectValue?["store"]?.stringValue,
                  let known = Store(rawValue: value) else { return nil }
            return known.rawValue
        })
        options.limits = JobLimits([declaration], overLimit: overLimit)
        return options
    }

    /// A job class that may call both stores in one run (the expiry sweep): one slot of each store's limiter.
    static func optionsForBothStores(_ base: JobOptions) -> JobOptions {
        var options = base
        options.limits = JobLimits(["apple", "google"].map { store in
            LimitDeclaration.concurrent(name, max: maxConcurrent, lease: lease, key: { _ in store })
        }, overLimit: overLimit)
        return options
    }
}
