import Foundation
import Hummingbird
import Logging
import WorkersQueue
import WorkersScheduler
import WorkersClient

/// What `workerctl web` serves and where.
public struct WebConfiguration: Sendable {
    public var host: String
    /// 0 picks a free port (logged as `web_url`).
    public var port: Int
    /// The Redis shards to show (docs/sharding.md); one shard without sharding.
    public var shards: ShardMap
    /// The token or password every request must carry (required for a host other than loopback).
    public var credential: String?
    /// PostgreSQL holding `job_outbox`, for the outbox page; nil: the page says none is configured.
    public var databaseURL: String?
    /// How job arguments are shown (docs/web.md "Secrets"): the default redacts secrets and personal data; a hook
    /// per class may hide more.
    public var redactor: ArgsRedactor = .standard

    public init(host: String = "127.0.0.1", port: Int = 9292, shards: ShardMap, credential: String? = nil,
                databaseURL: String? = nil) {
        self.host = host
        self.port = port
        self.shards = shards
        self.credential = credential
        self.databaseURL = databaseURL
    }

    /// The shortest credential accepted (review L5): 16 characters.
    public static let minimumCredentialLength = 16

    /// Loopback hosts, the only ones served without a credential: an IPv4 address in 127.0.0.0/8, `::1`, or a name
    /// every one of whose addresses is one of those (`localhost`). A name is resolved (`getaddrinfo`) as the bind
    /// will resolve it; a name that does not resolve, or resolves to any other address, is not loopback — so
    /// `127.example.com` is not loopback, whatever its digits.
    public static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 { return isLoopback(v6) }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(bare, nil, &hints, &result) == 0, let first = result else { return false }
        defer { freeaddrinfo(first) }
        var entry: UnsafeMutablePointer<addrinfo>? = first
        var any = false
        while let current = entry {
            defer { entry = current.pointee.ai_next }
            guard let address = current.pointee.ai_addr else { return false }
            switch Int32(current.pointee.ai_family) {
            case AF_INET:
                let ip = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                guard UInt32(bigEndian: ip.s_addr) >> 24 == 127 else { return false }
            case AF_INET6:
                let ip = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                guard isLoopback(ip) else { return false }
            default: return false
            }
            any = true
        }
        return any
    }

    private static func isLoopback(_ address: in6_addr) -> Bool {
        var copy = address
        return withUnsafeBytes(of: &copy) { bytes in bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1 }
    }

    /// Refuses a host other than loopback without a credential, and a credential shorter than 16 characters.
    public func validate() throws(WebError) {
        if let credential, credential.count < Self.minimumCredentialLength {
            throw credential.isEmpty ? .emptyCredential : .weakCredential(minimum: Self.minimumCredentialLength)
        }
        if credential == nil, !Self.isLoopback(host) { throw .credentialRequired(host: host) }
    }
}

public enum WebError: Error, Sendable, CustomStringConvertible, Equatable {
    case credentialRequired(host: String)
    case emptyCredential
    case weakCredential(minimum: Int)

    public var description: String {
        switch self {
        case .credentialRequired(let host):
            return "refusing to serve on \(host) without a credential: set WORKERCTL_WEB_TOKEN or --password-file (only loopback is served without one)"
        case .emptyCredential: return "the web credential is empty"
        case .weakCredential(let minimum):
            return "the web credential is too short: use at least \(minimum) characters (e.g. `openssl rand -hex 24`)"
        }
    }
}

/// `workerctl web`: the operator dashboard (docs/web.md). HTTP on Hummingbird 2; every page and action calls the
/// Queue admin API (the same calls as `workerctl`) on the `WorkersClient`'s own threads, never on the event loop.
/// GET never changes state; every change is a POST carrying the CSRF token (`WebSecurity`).
public enum WebServer {
    /// Serves until SIGINT/SIGTERM. Logs `web_url` once listening.
    public static func run(_ configuration: WebConfiguration, logger: Logger) async throws {
        try configuration.validate()
        let shards = configuration.shards.shards.map {
            ShardClient(name: $0.name, label: $0.endpoint.description,
                        client: WorkersClient(endpoint: $0.endpoint, maxConnections: 4, maxQueuedCalls: maxQueuedCalls))
        }
        let outbox = configuration.databaseURL.map { OutboxSource(databaseURL: $0) }
        defer {
            for shard in shards { shard.client.shutdown() }
            outbox?.shutdown()
        }
        let security = WebSecurity(credential: configuration.credential)
        let boundPort = BoundPort()
        let router = makeRouter(shards: shards, security: security, boundPort: boundPort, outbox: outbox,
                                redactor: configuration.redactor)
        let host = configuration.host
        let app = Application(router: router,
                              configuration: .init(address: .hostname(host, port: configuration.port)),
                              onServerRunning: { channel in
                                  let port = channel.localAddress?.port ?? configuration.port
                                  boundPort.set(port)
                                  logger.notice("web dashboard listening",
                                                metadata: ["web_url": "http://\(host.contains(":") ? "[\(host)]" : host):\(port)/"])
                              },
                              logger: logger)
        try await app.runService()
    }

    /// The paths of the GET routes the dashboard serves (`/job/{jid}` for a parameter), read from the router itself
    /// (Hummingbird's `Router.routes`), so a route added to `makeRouter` is in the list: the state fuzzer visits each
    /// one (Tests/JobsTests/StateFuzzTests.swift). Builds a router without shards; any thread.
    package static var getRoutes: [String] {
        makeRouter(shards: [], security: WebSecurity(credential: nil), boundPort: BoundPort()).routes
            .filter { $0.method == .get }.map(\.path.description)
    }

    /// The most rows one bulk request may name (`/jobs/STATE/selected/ACTION`); more is refused with 400.
    static let bulkSelectionLimit = 500

    /// Requests that may wait for a shard's 4 threads; past that the answer is 503 at once (review M5).
    static let maxQueuedCalls = 32

    /// One shard's name, its address for headings, and the client whose threads run its admin calls.
    struct ShardClient: Sendable {
        let name: String
        let label: String
        let client: WorkersClient
    }

    static func makeRouter(shards: [ShardClient], security: WebSecurity, boundPort: BoundPort,
                           outbox: OutboxSource? = nil, redactor: ArgsRedactor = .standard) -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: ResponseHeadersMiddleware())
        router.add(middleware: OriginMiddleware(security: security, boundPort: boundPort))
        router.add(middleware: CredentialMiddleware(security: security))
        router.add(middleware: AdminErrorMiddleware())

        /// Renders `render` on every shard and shows them together: one section per shard, headed with its name and
        /// address, when there are several (docs/sharding.md); the page as it is with one. 404 when no shard has it.
        /// `prefix`: rendered above the shards' sections (the dashboard's live totals, every shard summed).
        @Sendable func html(prefix: String = "", _ render: @escaping @Sendable (Pages, RedisConnection) throws -> Fragment?) async throws -> Response {
            var fragments: [(ShardClient, Fragment)] = []
            for (index, shard) in shards.enumerated() {
                // Each shard's render gets its own budget, counted from now: time spent waiting for a thread counts.
                let pages = Pages(csrf: security.csrfToken, shard: index, budget: Pages.requestBudget(), redactor: redactor)
                let fragment = try await onShard(index) { connection -> Fragment? in
                    // Waited past the deadline (the browser has likely given up): do no work for it.
                    if pages.budget.isPastDeadline { throw RequestDeadlineExceeded() }
                    return try render(pages, connection)
                }
                if let fragment { fragments.append((shard, fragment)) }
            }
            guard let first = fragments.first?.1 else {
                return htmlResponse(HTML.page(title: "Not found", body: "<p>Nothing here.</p>"), status: .notFound)
            }
            if shards.count == 1 { return htmlResponse(HTML.page(title: first.title, body: prefix + first.body)) }
            let title = first.title.replacing(/\s\(\d+\)$/, with: "")
            let body = fragments.map { shard, fragment in
                "<section class=\"shard\"><h2>Shard \(HTML.escape(shard.name)) <span class=\"muted\">\(HTML.escape(shard.label))</span></h2>"
                    + "<p class=\"muted\">\(HTML.escape(fragment.title))</p>\(fragment.body)</section>"
            }.joined(separator: "\n")
            return htmlResponse(HTML.page(title: title, body: prefix + body))
        }

        /// The index of the shard a form names (`shard`, the index its page rendered it with; read through Bounded).
        @Sendable func shardIndex(_ form: [String: String]) throws -> Int {
            guard let index = Bounded.int(parsing: form["shard"] ?? "0", in: -1...shards.count), shards.indices.contains(index) else {
                throw HTTPError(.badRequest, message: "unknown shard")
            }
            return index
        }

        /// Runs `body` on a thread of shard `index` with one of its connections. A Redis failure becomes
        /// `ShardUnavailable` naming the shard (a 503 page, review L3).
        @Sendable func onShard<T: Sendable>(_ index: Int, _ body: @escaping @Sendable (RedisConnection) throws -> T) async throws -> T {
            let shard = shards[index]
            do { return try await shard.client.withConnection(body) } catch let error as RedisError {
                throw ShardUnavailable(name: shard.name, label: shard.label, error: error)
            }
        }

        /// Every shard's `LiveStats` summed, read for one `now`.
        @Sendable func liveStats() async throws -> LiveStats {
            var total = LiveStats.zero(now: Clock.now())
            for index in shards.indices {
                let now = total.time
                total.add(try await onShard(index) { try LiveStats.load($0, now: now) })
            }
            return total
        }

        router.get("/") { _, _ in
            let live = try await liveStats()
            return try await html(prefix: Pages.liveSection(live)) { try $0.dashboard($1) }
        }
        // The stylesheet and the script (constants, `Assets`): same-origin, cacheable only as long as a page is.
        router.get("/assets/app.css") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/css; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: Assets.css)))
        }
        router.get("/assets/app.js") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/javascript; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: Assets.js)))
        }
        // The live view's data (polled by app.js every 5 s): totals and the last `LiveStats.minutes` minutes summed
        // over every shard. Fixed shape and size whatever the data: numbers only, never a name or a payload.
        router.get("/api/stats.json") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"],
                     body: .init(byteBuffer: ByteBuffer(string: try await liveStats().json())))
        }
        router.get("/queues") { _, _ in try await html { try $0.queues($1) } }
        router.get("/processes") { _, _ in try await html { try $0.processes($1) } }
        router.get("/limits") { _, _ in try await html { try $0.limits($1) } }
        router.get("/metrics") { _, _ in try await html { try $0.classMetrics($1) } }
        router.get("/unique") { _, _ in try await html { try $0.uniqueLocks($1) } }
        // One table for the whole fleet (not per shard): the relay routes each row to its queue's shard.
        router.get("/outbox") { _, _ in
            guard let outbox else { return htmlResponse(HTML.page(title: "Outbox", body: OutboxPage.notConfigured.body)) }
            let page: Fragment
            do { page = try await outbox.load().fragment() } catch {
                return htmlResponse(HTML.page(title: "Outbox", body: "<p>Cannot read job_outbox: \(HTML.escape("\(error)"))</p>"),
                                    status: .serviceUnavailable)
            }
            return htmlResponse(HTML.page(title: page.title, body: page.body))
        }
        router.get("/search") { request, _ in
            let text = request.uri.queryParameters.get("q") ?? ""
            return try await html { try $0.search($1, text: text) }
        }
        router.get("/jobs/:state") { request, context in
            guard let state = JobState(name: try context.parameters.require("state")) else { throw HTTPError(.notFound) }
            let query = request.uri.queryParameters
            let filter = JobFilter(queue: nonEmpty(query.get("queue")), className: nonEmpty(query.get("class")),
                                   grep: nonEmpty(query.get("q")))
            // A page number from the URL is read through Bounded (any digits, never a trap) and clamped into
            // 1...PageRequest.maxNumber: `?page=400000000000000000` shows an empty last page, not a crash.
            let number = query.get("page").flatMap { Bounded.int(parsing: $0, in: 1...PageRequest.maxNumber) } ?? 1
            let page = try PageRequest(number: number, size: 25)
            return try await html { try $0.jobs($1, state: state, filter: filter, page: page) }
        }
        router.get("/job/:jid") { _, context in
            let jid = try pathParameter(context, "jid")
            return try await html { try $0.job($1, jid: jid) }
        }
        router.get("/cron") { _, _ in try await html { try $0.cronList($1) } }
        router.get("/cron/:name") { _, context in
            let name = try CronAction.validName(try pathParameter(context, "name"))
            return try await html { try $0.cronEntry($1, name: name) }
        }
        router.get("/batches") { _, _ in try await html { try $0.batchList($1) } }
        router.get("/batch/:bid") { _, context in
            let bid = try pathParameter(context, "bid")
            return try await html { try $0.batch($1, bid: bid) }
        }

        // State changes: POST with the CSRF token; then back to the page the operator came from.
        router.post("/queues/:name/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            let name = try pathParameter(context, "name")
            let action = try context.parameters.require("action")
            try await onShard(try shardIndex(form)) { connection in
                switch action {
                case "pause": _ = try QueueAdmin.pause(connection, name: name)
                case "resume": _ = try QueueAdmin.resume(connection, name: name)
                case "clear": _ = try QueueAdmin.clear(connection, name: name)
                default: throw HTTPError(.notFound)
                }
            }
            return redirect(form["back"], fallback: "/queues")
        }
        router.post("/job/:jid/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            let jid = try pathParameter(context, "jid")
            if try context.parameters.require("action") == "cancel" {
                // The mark goes on every shard, where any worker's heartbeat reads it (`JobAdmin.cancel`); a waiting
                // copy is moved to dead as `Cancelled` on the shard that holds it.
                for index in shards.indices {
                    _ = try await onShard(index) { try JobAdmin(connection: $0).cancel(jid: jid) }
                }
                return redirect("/job/\(HTML.urlComponent(jid))")
            }
            guard let action = JobAction(rawValue: try context.parameters.require("action")) else { throw HTTPError(.notFound) }
            let state = form["state"].flatMap { JobState(name: $0) }
            try await onShard(try shardIndex(form)) { connection in
                _ = try JobAdmin(connection: connection).perform(action, jid: jid, in: state.map { [$0] })
            }
            return redirect(state.map { "/jobs/\($0.rawValue)" } ?? "/")
        }
        router.post("/jobs/:state/all/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            guard let state = JobState(name: try context.parameters.require("state")),
                  let action = JobAction(rawValue: try context.parameters.require("action")) else { throw HTTPError(.notFound) }
            let filter = JobFilter(queue: nonEmpty(form["queue"]), className: nonEmpty(form["class"]), grep: nonEmpty(form["q"]))
            try await onShard(try shardIndex(form)) { connection in
                _ = try JobAdmin(connection: connection).performAll(action, state: state, filter: filter)
            }
            return redirect("/jobs/\(state.rawValue)")
        }
        // The rows ticked on a list (`jid` checkboxes of the list's bulk form): the action applied to each, in the
        // list's state, one `JobAdmin.perform` per jid (the call of the row's own button). At most
        // `bulkSelectionLimit` jids per request (400 above, nothing done). A jid gone meanwhile or refused is
        // counted and skipped; the others are still done.
        router.post("/jobs/:state/selected/:action") { request, context in
            let body = try await request.body.collect(upTo: 64 * 1024)
            let text = String(buffer: body)
            let form = HTML.form(text)
            guard security.acceptsCSRF(form["csrf"]) else {
                throw HTTPError(.forbidden, message: "missing or wrong CSRF token: reload the page and try again")
            }
            guard let state = JobState(name: try context.parameters.require("state")),
                  let action = JobAction(rawValue: try context.parameters.require("action")),
                  action.allowedStates.contains(state) else { throw HTTPError(.notFound) }
            let jids = HTML.values("jid", in: text)
            guard jids.count <= bulkSelectionLimit else {
                throw HTTPError(.badRequest, message: "at most \(bulkSelectionLimit) jobs per request (\(jids.count) selected)")
            }
            for jid in jids { try JobAdmin.validate(jid: jid) }
            // One budget for every jid of the request (review M5): the searches together read at most
            // `ScanBudget.webEntries` entries and stop at the page deadline; jids past it are left as they are.
            let budget = Pages.requestBudget()
            let done = try await onShard(try shardIndex(form)) { connection -> Int in
                let admin = JobAdmin(connection: connection)
                var done = 0
                for jid in jids {
                    if budget.remaining <= 0 { budget.stop(); break }
                    do { try admin.perform(action, jid: jid, in: [state], budget: budget); done += 1 } catch is AdminError { continue }
                }
                return done
            }
            if budget.exhausted {
                return htmlResponse(HTML.page(title: "Partly done", body: """
                    <p id="partial">\(HTML.escape(action.rawValue.capitalized)): \(done) of \(jids.count) selected jobs done before the \
                    request's budget (\(ScanBudget.webEntries) entries scanned) ran out — partial; the others were not looked for.
                    Select fewer, or use the action on everything matching a filter.</p>
                    <p><a href="\(HTML.escape(form["back"].flatMap(localPath) ?? "/jobs/\(state.rawValue)"))">Back</a></p>
                    """))
            }
            return redirect(form["back"], fallback: "/jobs/\(state.rawValue)")
        }
        router.post("/processes/:identity/:signal") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            let identity = try pathParameter(context, "identity")
            let signal: ProcessAdmin.Signal
            switch try context.parameters.require("signal") {
            case "quiet": signal = .quiet
            case "stop": signal = .stop
            default: throw HTTPError(.notFound)
            }
            try await onShard(try shardIndex(form)) { _ = try ProcessAdmin.send(signal, to: identity, $0) }
            return redirect("/processes")
        }
        router.post("/cron/:name/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            let name = try CronAction.validName(try pathParameter(context, "name"))
            guard let action = CronAction(rawValue: try context.parameters.require("action")) else { throw HTTPError(.notFound) }
            try await onShard(try shardIndex(form)) { try action.perform(CronStore(connection: $0), name: name, now: Date()) }
            return redirect(form["back"], fallback: "/cron")
        }
        return router
    }

    /// The POSTed form once its CSRF token is this process's; 403 otherwise (nothing is changed).
    static func verifiedForm(_ request: Request, context: BasicRequestContext, security: WebSecurity) async throws -> [String: String] {
        let body = try await request.body.collect(upTo: 64 * 1024)
        let form = HTML.form(String(buffer: body))
        guard security.acceptsCSRF(form["csrf"]) else {
            throw HTTPError(.forbidden, message: "missing or wrong CSRF token: reload the page and try again")
        }
        return form
    }

    /// A path parameter, percent-decoded (Hummingbird hands path segments over as sent; the pages percent-encode
    /// names, so a queue, process identity or cron entry name with `:` or `<` arrives encoded).
    static func pathParameter(_ context: BasicRequestContext, _ name: String) throws -> String {
        let raw = try context.parameters.require(name)
        return raw.removingPercentEncoding ?? raw
    }

    static func htmlResponse(_ html: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "text/html; charset=utf-8"],
                 body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// A short plain-text answer (refusals before any page is rendered: no CSRF token, nothing from the request).
    static func textResponse(_ text: String, status: HTTPResponse.Status) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"],
                 body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }

    /// 303 to `path` when it is one of this dashboard's own pages (`localPath`), else to `fallback` (review L1:
    /// no open redirect through a form's `back`).
    static func redirect(_ path: String?, fallback: String = "/") -> Response {
        Response(status: .seeOther, headers: [.location: path.flatMap(localPath) ?? fallback])
    }

    /// The first path segments of the dashboard's pages.
    static let pageRoots: Set<String> = ["", "queues", "jobs", "job", "processes", "cron", "batches", "batch", "limits",
                                         "unique", "outbox", "search"]

    /// `path` when it is a path of this dashboard: starts with one `/`, its first segment is a page's
    /// (`pageRoots`), and it holds only URL characters (ASCII letters, digits, `-._~%/?=&+`; so no `\`, no `//`,
    /// no scheme, no space or control character). nil otherwise (`/\evil.example/x`, `//evil.example`, `https://…`).
    static func localPath(_ path: String) -> String? {
        guard path.hasPrefix("/"), !path.contains("//") else { return nil }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%/?=&+".unicodeScalars)
        guard path.unicodeScalars.allSatisfy({ allowed.contains($0) }) else { return nil }
        let first = path.dropFirst().prefix { $0 != "/" && $0 != "?" }
        return pageRoots.contains(String(first)) ? path : nil
    }

    static func nonEmpty(_ text: String?) -> String? { (text?.isEmpty ?? true) ? nil : text }
}

/// The headers every answer carries — pages, redirects, refusals and errors alike (an `HTTPError` thrown by a
/// handler is turned into its response here, so it gets them too): `nosniff`, `Cache-Control: no-store`,
/// `Referrer-Policy: same-origin`, the CSP: scripts and styles only from this origin (`/assets/app.js`,
/// `/assets/app.css`; no `'unsafe-inline'`), no framing, forms posting only here.
/// A header name (`HTTPTypes.HTTPField.Name`, reached through Hummingbird's exports).
typealias FieldName = HTTPFields.Element.Name

struct ResponseHeadersMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext

    static let headers: [(FieldName, String)] = [
        (FieldName("X-Content-Type-Options")!, "nosniff"),
        // Pages show jobs' payloads and the CSRF token: never kept by a browser or proxy cache (review M11).
        (.cacheControl, "no-store"),
        // Not `no-referrer`: under it a browser sends `Origin: null` with the pages' own POSTs, which the origin check
        // refuses. `same-origin` keeps every URL (a jid, a filter) from other sites and still names the origin here.
        (FieldName("Referrer-Policy")!, "same-origin"),
        (FieldName("Content-Security-Policy")!,
         "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
            + "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    ]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do { response = try await next(request, context) } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        for (name, value) in Self.headers { response.headers[name] = value }
        return response
    }
}

/// DNS rebinding and cross-site posts (review M4). Without a credential, every request must name this dashboard
/// in `Host`: `127.0.0.1`, `localhost` or `[::1]` with the bound port — else 421 (a rebound name is another
/// site's). Every POST must come from the dashboard's own pages (`WebSecurity.isSameOrigin`: `Sec-Fetch-Site`
/// same-origin when sent, `Origin` equal to `Host` when sent) — else 403. Both answers are plain text: no page,
/// no CSRF token, nothing from the request.
struct OriginMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let security: WebSecurity
    let boundPort: BoundPort

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let authority = request.head.authority
        if security.credential == nil {
            // A second Host header stays in headerFields (the first became `authority`): refused as ambiguous.
            guard WebSecurity.isLoopbackAuthority(authority, port: boundPort.port), !request.headers.contains(where: { $0.name.canonicalName == "host" }) else {
                return WebServer.textResponse(
                    "misdirected request: without a credential this dashboard answers only to Host 127.0.0.1, localhost or [::1] on its own port",
                    status: .misdirectedRequest)
            }
        }
        if request.method == .post {
            let fetchSite = FieldName("Sec-Fetch-Site").flatMap { request.headers[$0] }
            guard WebSecurity.isSameOrigin(origin: request.headers[.origin], fetchSite: fetchSite, authority: authority) else {
                return WebServer.textResponse("cross-site request refused: post from the dashboard's own pages", status: .forbidden)
            }
        }
        return try await next(request, context)
    }
}

/// Refuses (401, with a Basic challenge so a browser asks) every request without the credential, when one is set.
/// Guessing is throttled (review L5): past `FailureThrottle.limit` refusals in its window, every request is answered
/// 429 (with `Retry-After`) without the credential being compared, until the window ends — a guesser learns nothing
/// more, at the price of locking the dashboard for the rest of that window.
struct CredentialMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let security: WebSecurity
    let throttle = FailureThrottle()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard security.credential != nil else { return try await next(request, context) }
        if let wait = throttle.blockedFor() {
            return Response(status: .tooManyRequests, headers: [.retryAfter: String(wait)])
        }
        guard security.authorizes(request.headers[.authorization]) else {
            throttle.recordFailure()
            return Response(status: .unauthorized, headers: [.wwwAuthenticate: "Basic realm=\"workerctl web\", charset=\"UTF-8\""])
        }
        return try await next(request, context)
    }
}

/// An admin API or cron store refusal (no such job, process or cron entry, an action its state does not allow, a job
/// gone meanwhile, a cron entry whose job cannot be built) as a page saying why — 404 for "not found", 400 for a
/// malformed argument, 409 otherwise — instead of a bare 500. The message is escaped like any text.
struct AdminErrorMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as AdminError {
            let status: HTTPResponse.Status
            switch error {
            case .jobNotFound, .processNotFound: status = .notFound
            case .invalidArgument: status = .badRequest
            default: status = .conflict
            }
            return Self.refusal(error.description, status: status)
        } catch let error as CronStoreError {
            switch error {
            case .notFound: return Self.refusal(error.description, status: .notFound)
            case .unusableEntry: return Self.refusal(error.description, status: .conflict)
            case .unexpectedReply: throw error
            }
        } catch let error as ShardUnavailable {
            return Self.refusal(error.description, status: .serviceUnavailable)
        } catch is BlockingThreadsFull {
            return Self.refusal("The dashboard is busy (too many requests wait for Redis); try again in a moment.",
                                status: .serviceUnavailable)
        } catch is RequestDeadlineExceeded {
            return Self.refusal("The request waited too long for Redis; try again in a moment.", status: .serviceUnavailable)
        }
    }

    static func refusal(_ message: String, status: HTTPResponse.Status) -> Response {
        WebServer.htmlResponse(HTML.page(title: "Not done", body: "<p>\(HTML.escape(message))</p>"), status: status)
    }
}

/// A page's render started after its deadline (`Pages.requestDeadline`): answered 503, nothing read.
struct RequestDeadlineExceeded: Error {}

/// A shard's Redis failed while serving a page or an action (down, unreachable, refusing commands): answered 503
/// with a page naming the shard and its address (review L3). The reason is the connection error's text (an address
/// and the system's reason, never a password: `RedisEndpoint.description` is redacted); a reply Redis sent is not
/// repeated (it may hold job data).
struct ShardUnavailable: Error, CustomStringConvertible {
    let name: String
    let label: String
    let error: RedisError

    var description: String {
        let reason: String
        switch error {
        case .connectionFailed, .io, .invalidURL: reason = error.description
        case .server(let message): reason = "Redis refused the command (\(message.split(separator: " ").first ?? "error"))"
        case .unexpectedReply: reason = "Redis sent an unexpected reply"
        }
        return "Shard \(name) (\(label)) is unavailable: \(reason). The page is shown again once it answers."
    }
}
