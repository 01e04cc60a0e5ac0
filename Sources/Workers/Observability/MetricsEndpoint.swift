import Logging

/// The scrape-and-probe endpoint of a worker process (`/metrics`, `/healthz`, `/readyz`, served by
/// `MetricsServer`), as a part the runtime starts: give one to `WorkerProcess.init(…, metricsEndpoint:)` and the
/// process starts it first in `start()` and stops it at the end of `shutdown()`, in any executable (a service's own,
/// or `workerctl worker --metrics-port`). `/healthz` is the process's `WorkerProcess.health`.
///
/// The runtime has no metrics backend of its own: `/metrics` is what `metrics` renders (the executable bootstraps
/// swift-metrics with the backend it chose, e.g. swift-prometheus, and renders its registry here), `/readyz` what
/// `readiness` decides from the process's health and the dependencies it checks (nil: no `/readyz`, 404).
///
/// Thread rules: a value; `start` from any thread. `metrics` and `readiness` are called on the server's serving
/// thread only, one at a time, so each may keep a connection of its own without a lock.
public struct MetricsEndpoint: Sendable {
    /// The IPv4 address to bind: `127.0.0.1` (this machine only) by default, `0.0.0.0` for every interface.
    public var host: String
    /// 0 picks a free port (`MetricsServer.port`, `WorkerProcess.metricsPort` say which).
    public var port: Int
    /// The `/metrics` body (Prometheus text format).
    public var metrics: @Sendable () -> String
    /// `/readyz`: given the process's health, whether it may be sent work now, and the JSON body.
    public var readiness: (@Sendable (_ health: (ok: Bool, detail: String)) -> (ok: Bool, json: String))?

    public init(host: String = "127.0.0.1", port: Int, metrics: @escaping @Sendable () -> String,
                readiness: (@Sendable (_ health: (ok: Bool, detail: String)) -> (ok: Bool, json: String))? = nil) {
        self.host = host
        self.port = port
        self.metrics = metrics
        self.readiness = readiness
    }

    /// Binds and serves, with `health` as `/healthz` (and as `readiness`'s input), and logs `metrics endpoint
    /// listening` with `metrics_listen` (host:port) and `metrics_url` (a URL that reaches it from this machine:
    /// loopback when bound to `0.0.0.0`). Throws `MetricsServer.StartError` when the address cannot be bound.
    package func start(health: @escaping @Sendable () -> (ok: Bool, detail: String), logger: Logger) throws -> MetricsServer {
        var ready: (@Sendable () -> (ok: Bool, json: String))?
        if let readiness { ready = { readiness(health()) } }
        let server = try MetricsServer(host: host, port: port, metrics: metrics, health: health, readiness: ready)
        let localHost = host == "0.0.0.0" ? "127.0.0.1" : host
        logger.info("metrics endpoint listening", metadata: ["metrics_listen": "\(host):\(server.port)",
                                                            "metrics_url": "http://\(localHost):\(server.port)/metrics"])
        return server
    }
}
