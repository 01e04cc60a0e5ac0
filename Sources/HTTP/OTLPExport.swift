import Foundation
import Logging
import WorkersTelemetry

/// Turns tracing on from the `OTEL_*` variables (docs/tracing.md): an `OTLPTracer` whose batches are POSTed as
/// OTLP/HTTP JSON (https://opentelemetry.io/docs/specs/otlp/#otlphttp) to the traces endpoint over this module's
/// `HTTPClient`. The exporter's own requests are not traced (they run outside any span).
public enum OTLPExport {
    /// Bootstraps tracing when the environment asks for it and returns the batcher (its owner calls `shutdown()`
    /// before the process exits, so the last spans are sent); nil, and tracing stays off, otherwise.
    /// Call once per process, before any job is enqueued or run.
    public static func bootstrapFromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment,
                                                logger: Logger) -> SpanBatcher? {
        guard let configuration = TracingConfiguration(environment: environment) else { return nil }
        if let requested = configuration.unsupportedProtocol {
            logger.warning("OTLP protocol not supported; sending http/json", metadata: ["requested": "\(requested)"])
        }
        let client = HTTPClient(configuration: HTTPClientConfiguration(
            connectTimeout: .milliseconds(Int64(min(configuration.timeout, 5) * 1000)),
            timeout: .milliseconds(Int64(configuration.timeout * 1000)), maxIdleHandles: 1))
        let endpoint = configuration.tracesEndpoint
        let batcher = SpanBatcher(resourceAttributes: [("service.name", configuration.serviceName)],
                                  scheduleDelay: configuration.scheduleDelay) { body in
            var headers = HTTPHeaders()
            headers.set("Content-Type", "application/json")
            do {
                let response = try client.send(HTTPRequest(method: .post, url: endpoint, headers: headers, body: body))
                if response.status >= 300 {
                    logger.warning("OTLP export refused; spans dropped", metadata: ["status": "\(response.status)"])
                }
            } catch {
                logger.warning("OTLP export failed; spans dropped", metadata: ["error": "\((error as? HTTPError)?.kind ?? "unknown")"])
            }
        }
        JobTracing.bootstrap(OTLPTracer(batcher: batcher))
        batcher.start()
        return batcher
    }
}
