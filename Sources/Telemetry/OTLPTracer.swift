import Foundation
import Synchronization
import Tracing

/// The `ServiceContext` key under which `OTLPTracer` keeps the current span's W3C context.
public enum TraceParentKey: ServiceContextKey {
    public typealias Value = TraceParent
    public static var nameOverride: String? { "traceparent" }
}

extension ServiceContext {
    /// The W3C context of the current span (or of the remote parent extracted from a carrier).
    public var traceParent: TraceParent? {
        get { self[TraceParentKey.self] }
        set { self[TraceParentKey.self] = newValue }
    }
}

/// A `Tracer` (swift-distributed-tracing API) that records spans and hands finished ones to a `SpanBatcher`,
/// which exports them as OTLP/HTTP JSON. Sampling is parent-based, always-on for new traces (the OTel default
/// `parentbased_always_on`): a span under an unsampled parent is not recorded but passes the context on.
///
/// Propagation is W3C Trace Context: `inject` writes `traceparent` (and `tracestate` when the trace has one),
/// `extract` reads them. Thread-safe: any thread may start, change and end spans.
public struct OTLPTracer: Tracer {
    public let batcher: SpanBatcher

    public init(batcher: SpanBatcher) { self.batcher = batcher }

    public func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> OTLPSpan {
        var context = context()
        let parent = context.traceParent
        let own = TraceParent(traceID: parent?.traceID ?? TraceParent.randomTraceID(), spanID: TraceParent.randomSpanID(),
                              sampled: parent?.sampled ?? true, traceState: parent?.traceState)
        context.traceParent = own
        return OTLPSpan(name: operationName, kind: kind, context: context, own: own, parentSpanID: parent?.spanID,
                        start: instant().nanosecondsSinceEpoch, batcher: own.sampled ? batcher : nil)
    }

    public func forceFlush() { batcher.flush() }

    public func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext,
                                                      using extractor: Extract) where Extract.Carrier == Carrier {
        guard let header = extractor.extract(key: "traceparent", from: carrier),
              let parent = TraceParent(header: header, traceState: extractor.extract(key: "tracestate", from: carrier))
        else { return }
        context.traceParent = parent
    }

    public func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier,
                                                   using injector: Inject) where Inject.Carrier == Carrier {
        guard let own = context.traceParent else { return }
        injector.inject(own.header, forKey: "traceparent", into: &carrier)
        if let state = own.traceState { injector.inject(state, forKey: "tracestate", into: &carrier) }
    }
}

/// One span of `OTLPTracer`. Mutable state sits behind one lock; `end` hands it to the batcher exactly once.
public final class OTLPSpan: Span {
    public let context: ServiceContext
    let kind: SpanKind
    let own: TraceParent
    let parentSpanID: String?
    let start: UInt64
    /// nil for a span that is not sampled: nothing is recorded or exported.
    private let batcher: SpanBatcher?

    private struct State {
        var name: String
        var attributes: SpanAttributes = [:]
        var status: SpanStatus?
        var ended = false
    }
    private let state: Mutex<State>

    init(name: String, kind: SpanKind, context: ServiceContext, own: TraceParent, parentSpanID: String?, start: UInt64,
         batcher: SpanBatcher?) {
        self.context = context
        self.kind = kind
        self.own = own
        self.parentSpanID = parentSpanID
        self.start = start
        self.batcher = batcher
        self.state = Mutex(State(name: name))
    }

    public var isRecording: Bool { batcher != nil && !state.withLock { $0.ended } }

    public var operationName: String {
        get { state.withLock { $0.name } }
        set { state.withLock { if !$0.ended { $0.name = newValue } } }
    }

    public var attributes: SpanAttributes {
        get { state.withLock { $0.attributes } }
        set { state.withLock { if !$0.ended { $0.attributes = newValue } } }
    }

    public func setStatus(_ status: SpanStatus) { state.withLock { if !$0.ended { $0.status = status } } }

    /// Events are not recorded (nothing in this project adds any).
    public func addEvent(_ event: SpanEvent) {}

    /// Links are not recorded (nothing in this project adds any).
    public func addLink(_ link: SpanLink) {}

    /// Records only the error's type as `error.type` and marks the span failed: an error's message may hold
    /// personal data (docs/tracing.md).
    public func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes,
                                                    at instant: @autoclosure () -> Instant) {
        state.withLock {
            guard !$0.ended else { return }
            $0.attributes["error.type"] = String(describing: type(of: error))
            $0.status = SpanStatus(code: .error)
        }
    }

    public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        let finished: State? = state.withLock {
            if $0.ended { return nil }
            $0.ended = true
            return $0
        }
        guard let finished, let batcher else { return }
        batcher.add(FinishedSpan(name: finished.name, kind: kind, traceID: own.traceID, spanID: own.spanID,
                                 parentSpanID: parentSpanID, traceState: own.traceState, start: start,
                                 end: instant().nanosecondsSinceEpoch, attributes: finished.attributes,
                                 status: finished.status))
    }
}

/// What `SpanBatcher` exports of one ended span.
public struct FinishedSpan: Sendable {
    public let name: String
    public let kind: SpanKind
    public let traceID: String
    public let spanID: String
    public let parentSpanID: String?
    public let traceState: String?
    public let start: UInt64
    public let end: UInt64
    public let attributes: SpanAttributes
    public let status: SpanStatus?
}
