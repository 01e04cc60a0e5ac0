import Synchronization
import Tracing

/// The process-wide tracing switch of the queue, the runner, HTTP and Storage.
///
/// Off until `bootstrap` is called (workerctl calls it only when the `OTEL_*` variables ask for traces,
/// docs/tracing.md). While off, every instrumented path costs one relaxed atomic load: no span, no payload
/// field, no `ServiceContext` binding. `bootstrap` may be called once per process, before the threads that
/// enqueue or run jobs start; any thread may read `isEnabled`.
public enum JobTracing {
    private static let enabled = Atomic<Bool>(false)

    /// True once a tracer is bootstrapped.
    @inline(__always)
    public static var isEnabled: Bool { enabled.load(ordering: .relaxed) }

    /// Installs `tracer` as `InstrumentationSystem`'s tracer and turns tracing on. A service that already
    /// bootstrapped its own tracer (e.g. swift-otel) calls `enableWithBootstrappedTracer()` instead.
    public static func bootstrap(_ tracer: any Tracer) {
        InstrumentationSystem.bootstrap(tracer)
        enabled.store(true, ordering: .releasing)
    }

    /// Turns tracing on with the tracer the application bootstrapped through `InstrumentationSystem`.
    public static func enableWithBootstrappedTracer() {
        enabled.store(true, ordering: .releasing)
    }

    /// The bootstrapped tracer. Only meaningful while `isEnabled`.
    public static var tracer: any Tracer { InstrumentationSystem.tracer }

    /// The context spans started now descend from: the one bound on this thread/task, else a new trace.
    public static var currentContext: ServiceContext { ServiceContext.current ?? .topLevel }

    /// Starts a child span of the span bound on this thread, or nil when tracing is off or nothing is bound
    /// (HTTP calls and SQL transactions are traced only inside an enqueue or a job run, so the exporter's own
    /// requests never trace themselves).
    public static func startChildSpan(_ name: String, ofKind kind: SpanKind) -> (any Span)? {
        guard isEnabled, let parent = ServiceContext.current else { return nil }
        return tracer.startAnySpan(name, context: parent, ofKind: kind)
    }
}
