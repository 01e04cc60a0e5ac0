import Foundation
import Hummingbird
import Logging
import Queue
import Scheduler
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

    public init(host: String = "127.0.0.1", port: Int = 9292, shards: ShardMap, credential: String? = nil,
                databaseURL: String? = nil) {
        self.host = host
        self.port = port
        self.shards = shards
        self.credential = credential
        self.databaseURL = databaseURL
    }

    /// Loopback hosts: the only ones served without a credential.
    public static func isLoopback(_ host: String) -> Bool {
        host == "127.0.0.1" || host == "::1" || host == "localhost" || host.hasPrefix("127.")
    }

    /// Refuses a host other than loopback without a credential, and an empty credential.
    public func validate() throws(WebError) {
        if let credential, credential.isEmpty { throw .emptyCredential }
        if credential == nil, !Self.isLoopback(host) { throw .credentialRequired(host: host) }
    }
}

public enum WebError: Error, Sendable, CustomStringConvertible, Equatable {
    case credentialRequired(host: String)
    case emptyCredential

    public var description: String {
        switch self {
        case .credentialRequired(let host):
            return "refusing to serve on \(host) without a credential: set WORKERCTL_WEB_TOKEN or --password-file (only loopback is served without one)"
        case .emptyCredential: return "the web credential is empty"
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
            ShardClient(name: $0.name, label: $0.endpoint.description, client: WorkersClient(endpoint: $0.endpoint, maxConnections: 4))
        }
        let outbox = configuration.databaseURL.map { OutboxSource(databaseURL: $0) }
        defer {
            for shard in shards { shard.client.shutdown() }
            outbox?.shutdown()
        }
        let security = WebSecurity(credential: configuration.credential)
        let router = makeRouter(shards: shards, security: security, outbox: outbox)
        let host = configuration.host
        let app = Application(router: router,
                              configuration: .init(address: .hostname(host, port: configuration.port)),
                              onServerRunning: { channel in
                                  let port = channel.localAddress?.port ?? configuration.port
                                  logger.notice("web dashboard listening",
                                                metadata: ["web_url": "http://\(host.contains(":") ? "[\(host)]" : host):\(port)/"])
                              },
                              logger: logger)
        try await app.runService()
    }

    /// One shard's name, its address for headings, and the client whose threads run its admin calls.
    struct ShardClient: Sendable {
        let name: String
        let label: String
        let client: WorkersClient
    }

    static func makeRouter(shards: [ShardClient], security: WebSecurity, outbox: OutboxSource? = nil) -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: CredentialMiddleware(security: security))
        router.add(middleware: AdminErrorMiddleware())

        /// Renders `render` on every shard and shows them together: one section per shard, headed with its name and
        /// address, when there are several (docs/sharding.md); the page as it is with one. 404 when no shard has it.
        @Sendable func html(_ render: @escaping @Sendable (Pages, RedisConnection) throws -> Fragment?) async throws -> Response {
            var fragments: [(ShardClient, Fragment)] = []
            for (index, shard) in shards.enumerated() {
                let pages = Pages(csrf: security.csrfToken, shard: index)
                if let fragment = try await shard.client.withConnection({ try render(pages, $0) }) { fragments.append((shard, fragment)) }
            }
            guard let first = fragments.first?.1 else {
                return htmlResponse(HTML.page(title: "Not found", body: "<p>Nothing here.</p>"), status: .notFound)
            }
            if shards.count == 1 { return htmlResponse(HTML.page(title: first.title, body: first.body, refresh: first.refresh)) }
            let title = first.title.replacing(/\s\(\d+\)$/, with: "")
            let body = fragments.map { shard, fragment in
                "<section class=\"shard\"><h2>Shard \(HTML.escape(shard.name)) <span class=\"muted\">\(HTML.escape(shard.label))</span></h2>"
                    + "<p class=\"muted\">\(HTML.escape(fragment.title))</p>\(fragment.body)</section>"
            }.joined(separator: "\n")
            return htmlResponse(HTML.page(title: title, body: body, refresh: first.refresh))
        }

        /// The client of the shard a form names (`shard`, the index its page rendered it with).
        @Sendable func client(_ form: [String: String]) throws -> WorkersClient {
            guard let index = Int(form["shard"] ?? "0"), shards.indices.contains(index) else {
                throw HTTPError(.badRequest, message: "unknown shard")
            }
            return shards[index].client
        }

        router.get("/") { _, _ in try await html { try $0.dashboard($1) } }
        router.get("/queues") { _, _ in try await html { try $0.queues($1) } }
        router.get("/processes") { _, _ in try await html { try $0.processes($1) } }
        router.get("/limits") { _, _ in try await html { try $0.limits($1) } }
        router.get("/unique") { _, _ in try await html { try $0.uniqueLocks($1) } }
        // One table for the whole fleet (not per shard): the relay routes each row to its queue's shard.
        router.get("/outbox") { _, _ in
            guard let outbox else { return htmlResponse(HTML.page(title: "Outbox", body: OutboxPage.notConfigured.body)) }
            let page: Fragment
            do { page = try await outbox.load().fragment() } catch {
                return htmlResponse(HTML.page(title: "Outbox", body: "<p>Cannot read job_outbox: \(HTML.escape("\(error)"))</p>"),
                                    status: .serviceUnavailable)
            }
            return htmlResponse(HTML.page(title: page.title, body: page.body, refresh: page.refresh))
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
            let page = try PageRequest(number: query.get("page").flatMap(Int.init) ?? 1, size: 25)
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
            try await client(form).withConnection { connection in
                switch action {
                case "pause": _ = try QueueAdmin.pause(connection, name: name)
                case "resume": _ = try QueueAdmin.resume(connection, name: name)
                case "clear": _ = try QueueAdmin.clear(connection, name: name)
                default: throw HTTPError(.notFound)
                }
            }
            return redirect(form["back"] ?? "/queues")
        }
        router.post("/job/:jid/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            let jid = try pathParameter(context, "jid")
            guard let action = JobAction(rawValue: try context.parameters.require("action")) else { throw HTTPError(.notFound) }
            let state = form["state"].flatMap { JobState(name: $0) }
            try await client(form).withConnection { connection in
                _ = try JobAdmin(connection: connection).perform(action, jid: jid, in: state.map { [$0] })
            }
            return redirect(state.map { "/jobs/\($0.rawValue)" } ?? "/")
        }
        router.post("/jobs/:state/all/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            guard let state = JobState(name: try context.parameters.require("state")),
                  let action = JobAction(rawValue: try context.parameters.require("action")) else { throw HTTPError(.notFound) }
            let filter = JobFilter(queue: nonEmpty(form["queue"]), className: nonEmpty(form["class"]), grep: nonEmpty(form["q"]))
            try await client(form).withConnection { connection in
                _ = try JobAdmin(connection: connection).performAll(action, state: state, filter: filter)
            }
            return redirect("/jobs/\(state.rawValue)")
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
            try await client(form).withConnection { _ = try ProcessAdmin.send(signal, to: identity, $0) }
            return redirect("/processes")
        }
        router.post("/cron/:name/:action") { request, context in
            let form = try await verifiedForm(request, context: context, security: security)
            let name = try CronAction.validName(try pathParameter(context, "name"))
            guard let action = CronAction(rawValue: try context.parameters.require("action")) else { throw HTTPError(.notFound) }
            try await client(form).withConnection { try action.perform(CronStore(connection: $0), name: name, now: Date()) }
            return redirect(form["back"] ?? "/cron")
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
        Response(status: status, headers: [.contentType: "text/html; charset=utf-8",
                                           .init("X-Content-Type-Options")!: "nosniff",
                                           .init("Content-Security-Policy")!: "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; frame-ancestors 'none'"],
                 body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// 303 to a path of this dashboard (only a local path is followed: no open redirect).
    static func redirect(_ path: String) -> Response {
        let target = path.hasPrefix("/") && !path.hasPrefix("//") ? path : "/"
        return Response(status: .seeOther, headers: [.location: target])
    }

    static func nonEmpty(_ text: String?) -> String? { (text?.isEmpty ?? true) ? nil : text }
}

/// Refuses (401, with a Basic challenge so a browser asks) every request without the credential, when one is set.
struct CredentialMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let security: WebSecurity

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard security.authorizes(request.headers[.authorization]) else {
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
        }
    }

    static func refusal(_ message: String, status: HTTPResponse.Status) -> Response {
        WebServer.htmlResponse(HTML.page(title: "Not done", body: "<p>\(HTML.escape(message))</p>"), status: status)
    }
}
