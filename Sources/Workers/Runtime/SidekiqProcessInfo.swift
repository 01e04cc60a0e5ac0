import Foundation
import WorkersQueue

/// The `info` JSON of our entry in Sidekiq's process registry, readable by the APIs and Web UIs of
/// Sidekiq 6.4.1, 7.x and 8.x (docs/sidekiq-compat.md, "Process registry").
///
/// Fields, in the order Sidekiq v8.1.7 lib/sidekiq/launcher.rb `to_data` writes them:
/// `hostname`, `started_at` (float seconds in every version), `pid`, `tag`, `concurrency` (read
/// from `info` by 6.x and 7.x; 8.x reads the hash field the heartbeat also writes), `capsules`
/// (8.0.9+: `{name => {concurrency, mode, weights}}`, v8.1.7 lib/sidekiq/capsule.rb `to_h`; 8.x
/// derives `queues` and `weights` from it), `queues` (6.x/7.x), `weights` (7.x: one
/// `{queue => weight}` per capsule), `labels`, `identity`, `version`, `embedded` (false: Sidekiq
/// 7/8's `Process#quiet!`/`stop!` refuse an embedded process, and ours obeys both signals); then ours, which
/// Sidekiq's readers ignore: `classes` (the registered job classes, sorted, at most `maxListedClasses`; with more,
/// `classes_truncated: true` and none listed), read by `workerctl jobs explain` ("no live process registers its class")
/// and by a worker that meets a class it does not know (`ClassKnowledge`); `arg_versions` (the versions each versioned
/// class decodes, `[lowest, highest]`).
///
/// Weights mean what Sidekiq's capsule means by them (v8.1.7 capsule.rb `queues=`): all 0 is
/// strict order, otherwise weighted random. Our worker uses strict order when every queue has the
/// same weight (`WorkerConfiguration.strictOrder`), so then it reports mode `strict` and weight 0
/// for each queue; otherwise mode `weighted` and the configured weights.
struct SidekiqProcessInfo {
    /// What `Process#version` shows in Sidekiq's Web UI (it only prints it).
    static let version = "workerctl (Swift)"
    /// Our one capsule: Sidekiq names its default capsule `default`.
    static let capsuleName = "default"

    let configuration: WorkerConfiguration
    let identity: String
    let startedAt: Double
    /// The registered job classes (`JobRegistry.classNames`).
    var registeredClasses: [String] = []
    /// The `args_version`s decoded per versioned class (`JobRegistry.argumentVersions`): `arg_versions` in `info`,
    /// `{class: [lowest, highest]}` (docs/deploy.md, "Rolling deploys"); with the classes, listed only when they are.
    var argumentVersions: [String: ClosedRange<Int>] = [:]
    /// The most classes listed in `info` (it is written every heartbeat).
    static let maxListedClasses = 200

    var weights: JSONObject {
        var weights: JSONObject = [:]
        for queue in configuration.queues where weights[queue.name] == nil {
            weights[queue.name] = .int(configuration.strictOrder ? 0 : Int64(queue.weight))
        }
        return weights
    }

    var object: JSONObject {
        let capsule: JSONObject = [
            "concurrency": .int(Int64(configuration.concurrency)),
            "mode": .string(configuration.strictOrder ? "strict" : "weighted"),
            "weights": .object(weights),
        ]
        var queueNames: [String] = []
        for queue in configuration.queues where !queueNames.contains(queue.name) { queueNames.append(queue.name) }
        return [
            "hostname": .string(Identifiers.hostname), "started_at": .double(startedAt),
            "pid": .int(Int64(ProcessInfo.processInfo.processIdentifier)), "tag": .string(configuration.tag),
            "concurrency": .int(Int64(configuration.concurrency)),
            "capsules": .object([Self.capsuleName: .object(capsule)]),
            "queues": .array(queueNames.map { .string($0) }),
            "weights": .array([.object(weights)]),
            "labels": .array(configuration.labels.map { .string($0) }), "identity": .string(identity),
            "version": .string(Self.version), "embedded": false,
            "classes": .array(registeredClasses.count > Self.maxListedClasses ? [] : registeredClasses.sorted().map { .string($0) }),
            "classes_truncated": .bool(registeredClasses.count > Self.maxListedClasses),
            "arg_versions": .object(registeredClasses.count > Self.maxListedClasses ? [:] : JSONObject(
                argumentVersions.sorted { $0.key < $1.key }.map {
                    (key: $0.key, value: JSONValue.array([.int(Int64($0.value.lowerBound)), .int(Int64($0.value.upperBound))]))
                })),
        ]
    }

    var json: String { JSONValue.object(object).serialized() }
}
