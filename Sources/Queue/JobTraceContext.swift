import WorkersTelemetry
import Tracing

/// W3C Trace Context in a job payload (docs/tracing.md): `traceparent` and, when the trace has one,
/// `tracestate`, as extra top-level string fields. Sidekiq keeps unknown keys as they are and ignores them
/// (wire doc §2), so Ruby workers and the Web UI are unaffected. Present only when tracing is on.
package enum JobTraceContext {
    /// Writes payload fields.
    public struct PayloadInjector: Injector {
        public init() {}
        public func inject(_ value: String, forKey key: String, into carrier: inout JSONObject) {
            carrier[key] = .string(value)
        }
    }

    /// Reads payload fields (string values only).
    public struct PayloadExtractor: Extractor {
        public init() {}
        public func extract(key: String, from carrier: JSONObject) -> String? { carrier[key]?.stringValue }
    }

    /// The payload keys this module writes.
    public static let fieldNames = ["traceparent", "tracestate"]

    /// Starts the producer span of enqueuing `className` on `queue`, as a child of the span bound on this
    /// thread (or of a new trace). Attributes: class, queue and jid; never arguments.
    static func startEnqueueSpan(className: String, queue: String, jid: String) -> any Span {
        let span = JobTracing.tracer.startAnySpan("enqueue \(className)", context: JobTracing.currentContext,
                                                  ofKind: .producer)
        span.attributes["job.class"] = className
        span.attributes["job.queue"] = queue
        span.attributes["job.jid"] = jid
        span.attributes["messaging.system"] = "sidekiq"
        span.attributes["messaging.destination.name"] = queue
        return span
    }

    /// `payload` with the context of `span` (its `traceparent`).
    static func inject(_ span: any Span, into payload: inout JobPayload) {
        JobTracing.tracer.inject(span.context, into: &payload.fields, using: PayloadInjector())
    }

    /// The remote parent a payload carries, in a context of its own (empty when the payload has none).
    public static func extract(from payload: JobPayload) -> ServiceContext {
        var context = ServiceContext.topLevel
        JobTracing.tracer.extract(payload.fields, into: &context, using: PayloadExtractor())
        return context
    }

    /// Ends the enqueue spans of one write: failed with the error's type when `error` is set.
    static func end(_ spans: [any Span], error: (any Error)?) {
        for span in spans {
            if let error {
                span.attributes["error.type"] = String(describing: type(of: error))
                span.setStatus(SpanStatus(code: .error))
            }
            span.end()
        }
    }
}
