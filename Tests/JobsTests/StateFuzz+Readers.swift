import Foundation
import WorkersQueue

/// The state fuzzer's readers: an argument generator for every leaf command of `workerctl` (the command tree from
/// `workerctl --experimental-dump-help`) and a URL generator for every GET route of the dashboard
/// (`WebServer.getRoutes`), arguments and path parameters taken from the state. The test fails on a command or a
/// route without an entry here, and on an entry without a command or route.
enum StateReaders {
    /// When a command runs in an iteration: reads first, then the dashboard, then the admin moves (they change the
    /// state), then the long-running commands as children (stopped after a cycle).
    enum Phase { case read, admin, child }

    struct Command: Sendable {
        let phase: Phase
        /// Each element is one run's arguments (after the command's path).
        let arguments: @Sendable (inout SplitMix64, FuzzState) -> [[String]]
    }

    static let states = ["enqueued", "scheduled", "retry", "dead", "busy"]

    static func read(_ body: @escaping @Sendable (inout SplitMix64, FuzzState) -> [[String]]) -> Command { Command(phase: .read, arguments: body) }
    static func admin(_ body: @escaping @Sendable (inout SplitMix64, FuzzState) -> [[String]]) -> Command { Command(phase: .admin, arguments: body) }
    static let json = read { _, _ in [[], ["--json"]] }
    /// Started as a child by the test (`StateFuzzTests.startChildren`): no argument list of its own here.
    static let child = Command(phase: .child) { _, _ in [] }

    static func filters(_ r: inout SplitMix64, _ s: FuzzState) -> [String] {
        var out: [String] = []
        out += ["--state", r.pick(states)]
        if r.chance(0.5) { out += ["--queue", r.pick(s.queues)] }
        if r.chance(0.4) { out += ["--class", r.pick(s.classes)] }
        if r.chance(0.3) { out += ["--grep", r.pick(["a", "\u{202E}", "1e300", String(r.pick(s.jids).prefix(8))])] }
        return out
    }

    /// One admin move on one jid of the state, or on every job of a state matching filters.
    static let move = admin { r, s in
        [[r.pick(s.jids)], r.chance(0.5) ? ["--all", "--yes"] + filters(&r, s) : [r.pick(s.jids), "--json", "--state", r.pick(states)]]
    }

    /// Every leaf command of `workerctl`, by its path (`jobs ls`).
    static let commands: [String: Command] = [
        "worker": child, "run": child, "scheduler": child, "relay": child, "web": child, "top": child,
        "enqueue": admin { r, s in
            [["SteerProbe", "--queue", r.pick(s.plainQueues), "--args", #"[{"steps":1,"step_ms":1}]"#],
             [r.pick(s.classes), "--queue", r.pick(s.queues), "--in=" + r.pick(["60", "1e300", "-1", "nan"])]]
        },
        "migrate": read { _, _ in [["--status"], ["--status", "--json"]] },
        "stats": read { r, _ in [[], ["--json"], ["--classes"], ["--classes", "--json", "--period", r.pick(["hour", "day"])]] },
        "queues ls": json,
        "queues inspect": read { r, s in
            s.queues.map { [$0] } + [[r.pick(s.queues), "--json", "--page", r.pick(["1", "2", "400000000000000000"]), "--size", r.pick(["1", "25", "1000"])]]
        },
        "queues pause": admin { r, s in [[r.pick(s.queues)]] },
        "queues resume": admin { r, s in [[r.pick(s.queues)]] },
        "queues clear": admin { r, s in [[r.pick(s.queues), "--yes"]] },
        "jobs ls": read { r, s in [[], ["--json"]] + states.map { ["--state", $0] } + [filters(&r, s), filters(&r, s) + ["--json", "--page", r.pick(["2", "1000000"])]] },
        "jobs show": read { r, s in s.jids.map { [$0] } + [[r.pick(s.jids), "--json"], [r.pick(s.jids), "--state", r.pick(states)]] },
        "jobs explain": read { r, s in s.jids.map { [$0] } + [[r.pick(s.jids), "--json"]] },
        "jobs retry": move, "jobs run": move, "jobs kill": move, "jobs delete": move,
        "jobs cancel": admin { r, s in [[r.pick(s.jids)], [r.pick(s.jids), "--json"]] },
        "workers ls": json,
        "workers quiet": admin { r, s in [[r.pick(s.identities), "--yes"]] },
        "workers stop": admin { r, s in [[r.pick(s.identities), "--yes"], ["--all", "--yes"]] },
        "workers prune": admin { _, _ in [[], ["--json"]] },
        "cron ls": json,
        "cron history": read { r, s in s.cronNames.map { [$0] } + [[r.pick(s.cronNames), "--json"]] },
        "cron enable": admin { r, s in [[r.pick(s.cronNames)]] },
        "cron disable": admin { r, s in [[r.pick(s.cronNames)]] },
        "cron run": admin { r, s in [[r.pick(s.cronNames)], [r.pick(s.cronNames), "--tick", r.pick(["2026-12-07T00:00:00Z", "1e300", "-1"])]] },
        "cron delete": admin { r, s in [[r.pick(s.cronNames)]] },
        "revenue": read { _, s in [["--from", s.days[1], "--to", s.days[0]], ["--from", s.days[1], "--to", s.days[0], "--json"]] },
        "export verify-url": read { _, _ in [["https://example.invalid/export/x?expires=1e300&signature=zz"]] },
        "unique ls": json,
        "unique show": read { _, s in s.digests.map { [Keys.uniqueLock($0)] } + [[s.digests[0], "--json"]] },
        "unique release": admin { r, s in [[Keys.uniqueLock(r.pick(s.digests)), "--json"]] },
        "batches ls": read { r, _ in [[], ["--json"], ["--limit", r.pick(["1", "10000"])]] },
        "batches show": read { _, s in s.bids.map { [$0] } + [[s.bids[0], "--json"]] },
        "outbox status": read { _, _ in [[], ["--json"]] },
        "limits ls": json,
        "keys rotate": admin { _, _ in [["--batch-size", "10"]] },
        "keys new-kek": read { _, _ in [["fuzz-kek"]] },
        "keys scrub-errors": admin { _, _ in [["--dry-run"], []] },
        "keys journal": read { _, s in [[], ["--since", s.days[1] + "T00:00:00Z"]] },
        "keys recover": admin { _, s in [["--since", s.days[1] + "T00:00:00Z"]] },
        "help": read { r, _ in [[], [r.pick(["jobs", "queues", "worker"])]] },
    ]

    /// The most Redis commands one GET of each route may send, whatever the state (10,000 names in `queues`
    /// included): the largest bound RequestBudgetTests (Tests/WebDashboardTests) sets for the route, where a page
    /// past its budget says "partial" instead of reading on. `/metrics` is the exception: it reads the 60 + 144
    /// counter hashes of the hour and the day, then one `BITFIELD_RO` per class and bucket for up to
    /// `ClassMetricsReport.maxClasses` classes (the fuzzer's 3 classes: 612 commands; RequestBudgetTests' 250 holds
    /// only without class metrics), so its bound here is what the code allows today.
    static let routeBudgets: [String: Int] = [
        "/": 5_500, "/assets/app.css": 0, "/assets/app.js": 0, "/api/stats.json": 2_200, "/queues": 7_500,
        "/processes": 1_100, "/limits": 150, "/metrics": (60 + 144) * (1 + ClassMetricsReport.maxClasses), "/unique": 350, "/outbox": 0, "/search": 9_500,
        "/jobs/{state}": 3_300, "/job/{jid}": 7_800, "/cron": 20, "/cron/{name}": 20, "/batches": 250, "/batch/{bid}": 20,
    ]

    /// Percent-encodes a path segment (every byte but unreserved characters).
    static func segment(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")) ?? ""
    }

    /// Every GET route of the dashboard (`WebServer.getRoutes`, `{parameter}` as Hummingbird writes it): the paths
    /// (with query) to request, relative to the dashboard's root.
    static let routes: [String: @Sendable (inout SplitMix64, FuzzState) -> [String]] = [
        "/": { _, _ in [""] },
        "/assets/app.css": { _, _ in ["assets/app.css"] },
        "/assets/app.js": { _, _ in ["assets/app.js"] },
        "/api/stats.json": { _, _ in ["api/stats.json"] },
        "/queues": { _, _ in ["queues"] },
        "/processes": { _, _ in ["processes"] },
        "/limits": { _, _ in ["limits"] },
        "/metrics": { _, _ in ["metrics"] },
        "/unique": { _, _ in ["unique"] },
        "/outbox": { _, _ in ["outbox"] },
        "/search": { r, s in ["search?q=" + segment(r.pick(s.jids)), "search?q=" + segment(String(r.pick(s.jids).prefix(6))), "search?q=%E2%80%AE"] },
        "/jobs/{state}": { r, s in
            states.map { "jobs/\($0)" } + ["jobs/\(r.pick(states))?queue=\(segment(r.pick(s.queues)))&class=\(segment(r.pick(s.classes)))&q=\(segment("a"))&page=\(r.pick(["2", "400000000000000000", "-1", "1e300"]))"]
        },
        "/job/{jid}": { _, s in s.jids.map { "job/" + segment($0) } },
        "/cron": { _, _ in ["cron"] },
        "/cron/{name}": { _, s in s.cronNames.map { "cron/" + segment($0) } },
        "/batches": { _, _ in ["batches"] },
        "/batch/{bid}": { _, s in s.bids.map { "batch/" + segment($0) } },
    ]
}
