import WorkersQueue

/// The Redis keys the bench probe jobs write (bench/test-only: registered only with `--bench-jobs`). Immutable.
package enum BenchKeys {
    /// STRING counter: the limit probe's runs in flight for limiter `name`.
    package static func limitRunning(_ name: String) -> String { "probe:limits:running:" + name }
    /// STRING: the most runs of `name` seen in flight at once.
    package static func limitMax(_ name: String) -> String { "probe:limits:max:" + name }
    /// STRING counter: the limit probe's finished runs for `name`.
    package static func limitDone(_ name: String) -> String { "probe:limits:done:" + name }
    /// HASH window → runs admitted in it (the window limiter's probe).
    package static let limitWindows = "probe:limits:windows"
    /// LIST of admission times, ms (the bucket limiter's probe).
    package static let limitBucket = "probe:limits:bucket"
    /// STRING counters of the steering probe: runs started and finished of one jid.
    package static func steerRuns(_ jid: String) -> String { "probe:steer:runs:" + jid }
    package static func steerDone(_ jid: String) -> String { "probe:steer:done:" + jid }

    /// The key patterns above, for the key catalogue (the union: Tests/JobsTests/KeyCatalogue+All.swift).
    package static let catalogue: [KeyPattern] = {
        let name = [KeyPattern.Part("limit", sample: "probe")], jid = [KeyPattern.Part("jid", sample: "0123456789abcdef01234567")]
        return [
            KeyPattern("probe-limit-running", [.string], owner: "bench jobs", parts: name) { limitRunning($0[0]) },
            KeyPattern("probe-limit-max", [.string], owner: "bench jobs", parts: name) { limitMax($0[0]) },
            KeyPattern("probe-limit-done", [.string], owner: "bench jobs", parts: name) { limitDone($0[0]) },
            KeyPattern("probe-limit-windows", .hash, owner: "bench jobs", key: limitWindows),
            KeyPattern("probe-limit-bucket", .list, owner: "bench jobs", key: limitBucket),
            KeyPattern("probe-steer-runs", [.string], owner: "bench jobs", parts: jid) { steerRuns($0[0]) },
            KeyPattern("probe-steer-done", [.string], owner: "bench jobs", parts: jid) { steerDone($0[0]) },
        ]
    }()
}
