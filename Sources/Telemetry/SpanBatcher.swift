import Foundation
import Synchronization
import Tracing

/// Collects ended spans and exports them in batches as OTLP/HTTP JSON through `send`, on its own thread.
///
/// The OTel batch span processor's rules (https://opentelemetry.io/docs/specs/otel/trace/sdk/#batching-processor):
/// a batch goes out every `scheduleDelay` or as soon as `maxBatchSize` spans wait; beyond `maxQueueSize`
/// waiting spans new ones are dropped (counted in `dropped`). `flush()` exports what waits, on the caller's
/// thread, and returns when `send` returned. Any thread may call `add` and `flush`; `send` is called by one
/// thread at a time.
public final class SpanBatcher: Sendable {
    /// Sends one encoded `ExportTraceServiceRequest` (JSON). Errors are the sender's to log; spans are not retried.
    public typealias Send = @Sendable (Data) -> Void

    public let resourceAttributes: [(String, String)]
    private let send: Send
    private let maxQueueSize: Int
    private let maxBatchSize: Int
    private let scheduleDelay: Double

    private let queue = Mutex<[FinishedSpan]>([])
    private let droppedCount = Atomic<Int>(0)
    /// Serialises exports between the batch thread and `flush`.
    private let exporting = Mutex<Void>(())
    private let wake = DispatchSemaphore(value: 0)
    private let stopped = Atomic<Bool>(false)

    public init(resourceAttributes: [(String, String)], scheduleDelay: Double = 5, maxQueueSize: Int = 2048,
                maxBatchSize: Int = 512, send: @escaping Send) {
        self.resourceAttributes = resourceAttributes
        self.scheduleDelay = scheduleDelay
        self.maxQueueSize = maxQueueSize
        self.maxBatchSize = maxBatchSize
        self.send = send
    }

    /// Starts the batch thread. Call once.
    public func start() {
        let thread = Thread { [self] in
            while !stopped.load(ordering: .acquiring) {
                _ = wake.wait(timeout: .now() + scheduleDelay)
                exportWaiting()
            }
        }
        thread.name = "otlp-export"
        thread.start()
    }

    /// Spans dropped because the queue was full.
    public var dropped: Int { droppedCount.load(ordering: .relaxed) }

    func add(_ span: FinishedSpan) {
        let count: Int? = queue.withLock {
            guard $0.count < maxQueueSize else { return nil }
            $0.append(span)
            return $0.count
        }
        guard let count else {
            droppedCount.add(1, ordering: .relaxed)
            return
        }
        if count == maxBatchSize { wake.signal() }
    }

    /// Exports every waiting span now (synchronously).
    public func flush() { exportWaiting() }

    /// Exports what waits and stops the batch thread.
    public func shutdown() {
        stopped.store(true, ordering: .releasing)
        wake.signal()
        exportWaiting()
    }

    private func exportWaiting() {
        exporting.withLock { _ in
            while true {
                let batch: [FinishedSpan] = queue.withLock {
                    let taken = Array($0.prefix(maxBatchSize))
                    $0.removeFirst(taken.count)
                    return taken
                }
                if batch.isEmpty { return }
                send(OTLPJSON.exportRequest(batch, resource: resourceAttributes))
            }
        }
    }
}

/// The OTLP/HTTP JSON encoding of an `ExportTraceServiceRequest`
/// (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding): trace and span ids as hex strings (not
/// base64), enums as integers, 64-bit integers as decimal strings, field names in lowerCamelCase.
public enum OTLPJSON {
    public static func exportRequest(_ spans: [FinishedSpan], resource: [(String, String)]) -> Data {
        let object: [String: Any] = [
            "resourceSpans": [[
                "resource": ["attributes": resource.map { ["key": $0.0, "value": ["stringValue": $0.1]] }],
                "scopeSpans": [[
                    "scope": ["name": "swift-workers"],
                    "spans": spans.map(span),
                ]],
            ]],
        ]
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
    }

    static func span(_ span: FinishedSpan) -> [String: Any] {
        var object: [String: Any] = [
            "traceId": span.traceID, "spanId": span.spanID, "name": span.name, "kind": kind(span.kind),
            "startTimeUnixNano": String(span.start), "endTimeUnixNano": String(span.end),
            "attributes": attributes(span.attributes),
        ]
        if let parent = span.parentSpanID { object["parentSpanId"] = parent }
        if let state = span.traceState { object["traceState"] = state }
        if let status = span.status {
            // Status.StatusCode: STATUS_CODE_UNSET 0, STATUS_CODE_OK 1, STATUS_CODE_ERROR 2.
            object["status"] = ["code": status.code == .ok ? 1 : 2]
        }
        return object
    }

    /// Span.SpanKind: INTERNAL 1, SERVER 2, CLIENT 3, PRODUCER 4, CONSUMER 5.
    static func kind(_ kind: SpanKind) -> Int {
        switch kind {
        case .server: return 2
        case .client: return 3
        case .producer: return 4
        case .consumer: return 5
        default: return 1
        }
    }

    static func attributes(_ attributes: SpanAttributes) -> [[String: Any]] {
        var list: [[String: Any]] = []
        attributes.forEach { key, attribute in
            list.append(["key": key, "value": value(attribute)])
        }
        return list.sorted { ($0["key"] as? String ?? "") < ($1["key"] as? String ?? "") }
    }

    static func value(_ attribute: SpanAttribute) -> [String: Any] {
        switch attribute {
        case .int32(let v): return ["intValue": String(v)]
        case .int64(let v): return ["intValue": String(v)]
        case .double(let v): return ["doubleValue": v]
        case .bool(let v): return ["boolValue": v]
        case .string(let v): return ["stringValue": v]
        default: return ["stringValue": "\(attribute)"]
        }
    }
}
