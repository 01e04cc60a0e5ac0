import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The fake external services in `Tests/Fakes/fakes.py`.
public enum FakeService: String, CaseIterable, Sendable {
    case apple, google, nominatim, subscription, smtp
}

public struct FakeServerError: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { "FakeServers: \(message)" }
}

/// One request a fake recorded (`GET /__admin/requests`).
public struct FakeRequest: Sendable {
    public let method: String
    public let path: String
    /// Raw query string (without `?`).
    public let query: String
    public let headers: [String: String]
    public let body: String
    /// Seconds since 1970 when the fake received it.
    public let timestamp: Double
    /// The client's TCP port: equal ports mean one reused (keep-alive) connection.
    public let clientPort: Int

    /// Case-insensitive header lookup.
    public func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }

    init(_ d: [String: Any]) {
        method = d["method"] as? String ?? ""
        path = d["path"] as? String ?? ""
        query = d["query"] as? String ?? ""
        headers = d["headers"] as? [String: String] ?? [:]
        body = d["body"] as? String ?? ""
        timestamp = d["timestamp"] as? Double ?? 0
        clientPort = d["client_port"] as? Int ?? 0
    }
}

/// One message the fake SMTP server accepted (`GET /__admin/messages` on the SMTP admin port).
public struct FakeSMTPMessage: Sendable {
    public let mailFrom: String
    public let rcptTo: [String]
    /// The DATA section as received, dot-stuffing removed.
    public let data: String
    public let subject: String?
    public let messageID: String?
    public let body: String
    public let authUser: String?
    /// Header fields in order (unfolded).
    public let headers: [(String, String)]

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    init(_ d: [String: Any]) {
        mailFrom = d["mail_from"] as? String ?? ""
        rcptTo = d["rcpt_to"] as? [String] ?? []
        data = d["data"] as? String ?? ""
        subject = d["subject"] as? String
        messageID = d["message_id"] as? String
        body = d["body"] as? String ?? ""
        authUser = d["auth_user"] as? String
        headers = (d["headers"] as? [[String]] ?? []).compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil }
    }
}

/// Runs `python3 Tests/Fakes/fakes.py` as a subprocess and talks to its admin API.
///
/// Lifetime: the subprocess starts in `init` and stops on `stop()` or `deinit`; it also exits by itself when
/// this process dies (it watches its stdin, a pipe only we hold). `init(attachingTo:)` talks to fakes another
/// process started (a bench script's): it never stops them. Every fake binds 127.0.0.1 on an OS-chosen
/// port. Thread rules: all methods may be called from any thread (admin calls are independent HTTP requests).
/// Admin calls use FoundationNetworking's URLSession, not the `HTTP` target (TestSupport must not depend on it).
public final class FakeServers: @unchecked Sendable {
    /// Port per key of the ready line: "apple", "google", "nominatim", "subscription", "smtp", "smtp_admin".
    public let ports: [String: Int]
    public let host = "127.0.0.1"

    /// The subprocess and its stdin; nil when attached to fakes this process did not start.
    private let process: Process?
    private let stdinPipe: Pipe?
    private let lock = NSLock()
    private var stopped = false  // guarded by `lock`
    private let session: URLSession

    /// Starts the requested fakes and waits (up to `readyTimeout` seconds) for their ports.
    public init(_ services: [FakeService] = FakeService.allCases, readyTimeout: TimeInterval = 20) throws {
        let script = TestServices.repositoryRoot.appendingPathComponent("Tests/Fakes/fakes.py").path
        guard FileManager.default.fileExists(atPath: script) else { throw FakeServerError("missing \(script)") }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", script, "--exit-on-stdin-close"] + services.map { "--\($0.rawValue)" }
        let out = Pipe()
        let input = Pipe()
        p.standardOutput = out
        p.standardInput = input
        p.standardError = FileHandle.standardError
        try p.run()

        let line = LineBox()
        let ready = DispatchSemaphore(value: 0)
        let reader = out.fileHandleForReading
        DispatchQueue.global().async {
            var bytes = Data()
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                bytes.append(chunk)
                if bytes.contains(UInt8(ascii: "\n")) { break }
            }
            line.set(bytes)
            ready.signal()
        }
        guard ready.wait(timeout: .now() + readyTimeout) == .success,
              let data = line.get(),
              let first = data.split(separator: UInt8(ascii: "\n")).first,
              let object = try? JSONSerialization.jsonObject(with: Data(first)) as? [String: Int] else {
            p.terminate()
            throw FakeServerError("fakes.py did not report its ports within \(readyTimeout) s")
        }
        ports = object
        process = p
        stdinPipe = input
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 15
        session = URLSession(configuration: config)
    }

    /// Talks to fakes already running (their ready line's `ports`), e.g. those a bench script started; `stop()` and
    /// `deinit` leave them running.
    public init(attachingTo ports: [String: Int]) {
        self.ports = ports
        process = nil
        stdinPipe = nil
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 15
        session = URLSession(configuration: config)
    }

    deinit { stop() }

    /// Stops the subprocess (idempotent).
    public func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        defer { session.invalidateAndCancel() }
        guard let process, let stdinPipe else { return }
        try? stdinPipe.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        // A fake that does not exit within 5 s is killed: a stuck fake must never hang the suite.
        let deadline = Date(timeIntervalSinceNow: 5)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    // MARK: - Shared instance

    nonisolated(unsafe) private static var sharedInstance: FakeServers?
    private static let sharedLock = NSLock()

    /// One process-wide instance running every fake, started on first use and stopped when the process exits.
    /// Tests using it should `reset` the services they touch in `setUp`.
    public static func shared() throws -> FakeServers {
        try sharedLock.withLock {
            if let s = sharedInstance { return s }
            let s = try FakeServers()
            sharedInstance = s
            return s
        }
    }

    // MARK: - Addresses

    public func port(_ service: FakeService) -> Int { ports[service.rawValue] ?? 0 }

    /// `http://127.0.0.1:PORT` of an HTTP fake (for SMTP: its admin port).
    public func baseURL(_ service: FakeService) -> String {
        let key = service == .smtp ? "smtp_admin" : service.rawValue
        return "http://\(host):\(ports[key] ?? 0)"
    }

    public var appleVerifyReceiptProductionURL: String { baseURL(.apple) + "/verifyReceipt" }
    public var appleVerifyReceiptSandboxURL: String { baseURL(.apple) + "/sandbox/verifyReceipt" }
    /// Base for `/inApps/v1/...` (production); the sandbox base is `appleServerAPISandboxBaseURL`.
    public var appleServerAPIBaseURL: String { baseURL(.apple) }
    public var appleServerAPISandboxBaseURL: String { baseURL(.apple) + "/sandbox" }
    public var googleTokenURL: String { baseURL(.google) + "/token" }
    /// Base for `/androidpublisher/v3/...`.
    public var googleAPIBaseURL: String { baseURL(.google) }
    public var nominatimBaseURL: String { baseURL(.nominatim) }
    public var subscriptionServiceBaseURL: String { baseURL(.subscription) }
    public var smtpPort: Int { port(.smtp) }
    public var smtpURL: String { "smtp://\(host):\(smtpPort)" }

    // MARK: - Admin API

    /// Calls `/__admin/<path>` on `service` and returns the decoded JSON answer.
    @discardableResult
    public func admin(_ service: FakeService, _ method: String = "GET", _ path: String, json: Any? = nil) throws
        -> [String: Any] {
        let url = baseURL(service) + "/__admin/" + path
        var req = URLRequest(url: URL(string: url)!)
        req.httpMethod = method
        if let json {
            req.httpBody = try JSONSerialization.data(withJSONObject: json)
            req.setValue("application/json", forHTTPHeaderField: "Content-Type")
        } else if method != "GET" {
            req.httpBody = Data()
        }
        let box = LineBox()
        let done = DispatchSemaphore(value: 0)
        session.dataTask(with: req) { data, response, error in
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            box.set(data ?? Data(), status: status, error: error.map { "\($0)" })
            done.signal()
        }.resume()
        guard done.wait(timeout: .now() + 20) == .success else { throw FakeServerError("admin \(url) timed out") }
        if let e = box.error { throw FakeServerError("admin \(method) \(url): \(e)") }
        guard (200...299).contains(box.status) else {
            throw FakeServerError("admin \(method) \(url): HTTP \(box.status) \(String(decoding: box.get() ?? Data(), as: UTF8.self))")
        }
        return (try? JSONSerialization.jsonObject(with: box.get() ?? Data())) as? [String: Any] ?? [:]
    }

    /// Queues one scripted behaviour (see fakes.py: match, times, status, body, json, headers, delay, hang, ...).
    public func script(_ service: FakeService, _ spec: [String: Any]) throws {
        try admin(service, "POST", "script", json: spec)
    }

    /// Forgets recorded requests, scripts, config and state of `service`.
    public func reset(_ service: FakeService) throws { try admin(service, "POST", "reset") }

    public func resetAll() throws {
        for s in FakeService.allCases where ports[s.rawValue] != nil { try reset(s) }
    }

    /// Merges options into the service's config (e.g. Nominatim `rate_limit_per_second`).
    public func configure(_ service: FakeService, _ options: [String: Any]) throws {
        try admin(service, "POST", "config", json: options)
    }

    /// Requests recorded by `service` (admin calls excluded), optionally only those for `path`.
    public func requests(_ service: FakeService, path: String? = nil) throws -> [FakeRequest] {
        let q = path.map { "?path=" + ($0.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? $0) } ?? ""
        let answer = try admin(service, "GET", "requests" + q)
        return (answer["requests"] as? [[String: Any]] ?? []).map(FakeRequest.init)
    }

    /// The largest number of requests to `path` that arrived within any `window` seconds.
    public func maxRequestsInWindow(_ service: FakeService, path: String? = nil, window: Double = 1.0) throws -> Int {
        var q = "?window=\(window)"
        if let path { q += "&path=" + (path.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? path) }
        return try admin(service, "GET", "stats" + q)["max_in_window"] as? Int ?? 0
    }

    /// Messages the fake SMTP server accepted, oldest first.
    public func smtpMessages() throws -> [FakeSMTPMessage] {
        let answer = try admin(.smtp, "GET", "messages")
        return (answer["messages"] as? [[String: Any]] ?? []).map(FakeSMTPMessage.init)
    }

    /// Subscription Service ledger: credited amount per idempotency key, and how many times each was applied.
    public func subscriptionCredits() throws -> (creditedByKey: [String: Int], applicationsByKey: [String: Int]) {
        let a = try admin(.subscription, "GET", "subscription/credits")
        return (a["credited_by_key"] as? [String: Int] ?? [:], a["applications_by_key"] as? [String: Int] ?? [:])
    }
}

/// A value handed from a callback thread to a waiting thread.
private final class LineBox: @unchecked Sendable {
    private let lock = NSLock()
    private var data: Data?
    private var _status = 0
    private var _error: String?

    func set(_ d: Data, status: Int = 0, error: String? = nil) {
        lock.withLock { data = d; _status = status; _error = error }
    }
    func get() -> Data? { lock.withLock { data } }
    var status: Int { lock.withLock { _status } }
    var error: String? { lock.withLock { _error } }
}
