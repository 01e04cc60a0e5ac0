import WorkersQueue
import WorkersTelemetry
import Tracing

/// The run's consumer span (docs/tracing.md), written as the runtime's outermost `RunMiddleware`: while tracing is
/// on, the run is a span, child of the payload's `traceparent`, bound as the thread's `ServiceContext` around the
/// whole run, so the job's HTTP calls, SQL transactions and enqueues are its children; `job.outcome` says how the
/// run was settled. While off: one atomic load, no span, nothing bound.
///
/// Stateless; any pool thread.
struct TracingRunMiddleware: RunMiddleware {
    func run(_ request: RunRequest, next: (RunRequest) -> RunResult) -> RunResult {
        guard JobTracing.isEnabled else { return next(request) }
        let span = Self.start(request)
        let result = ServiceContext.withValue(span.context) { next(request) }
        Self.end(span, result)
        return result
    }

    /// The same span around an async job's run, bound as the task's `ServiceContext`.
    func run(async request: RunRequest, next: (RunRequest) async -> RunResult) async -> RunResult {
        guard JobTracing.isEnabled else { return await next(request) }
        let span = Self.start(request)
        let result = await ServiceContext.withValue(span.context) { await next(request) }
        Self.end(span, result)
        return result
    }

    private static func start(_ request: RunRequest) -> any Span {
        let payload = request.payload
        let span = JobTracing.tracer.startAnySpan("perform \(payload.className)",
                                                  context: JobTraceContext.extract(from: payload), ofKind: .consumer)
        span.attributes["job.class"] = payload.className
        span.attributes["job.queue"] = request.job.queue
        span.attributes["job.jid"] = payload.jid ?? "-"
        span.attributes["job.attempt"] = Int64((payload.retryCount ?? -1) + 2)
        span.attributes["messaging.system"] = "sidekiq"
        return span
    }

    private static func end(_ span: any Span, _ result: RunResult) {
        span.attributes["job.outcome"] = Self.outcomeName(result)
        if result.isFailure { span.setStatus(SpanStatus(code: .error)) }
        span.end()
    }

    /// The `job.outcome` span attribute: how the run was settled.
    static func outcomeName(_ result: RunResult) -> String {
        guard case .settled(let settlement, _) = result else { return "failed" }  // a redo: the group runs again
        switch settlement {
        case .ack: return "success"
        case .retry: return "retry"
        case .dead: return "dead"
        case .drop: return "dropped"
        case .requeue: return "requeued"
        case .schedule: return "rescheduled"
        }
    }
}
