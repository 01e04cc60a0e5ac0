import Foundation
import WorkersTelemetry
import XCTest

/// The W3C `traceparent` parser (https://www.w3.org/TR/trace-context/ §3.2) and what the `OTEL_*` variables
/// turn on (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/).
final class TraceContextTests: XCTestCase {
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    let span = "00f067aa0ba902b7"

    func testTraceParentParsesTheSpecExampleAndWritesVersion00() throws {
        let parent = try XCTUnwrap(TraceParent(header: "00-\(trace)-\(span)-01", traceState: " congo=t61rcWkgMzE "))
        XCTAssertEqual(parent.traceID, trace)
        XCTAssertEqual(parent.spanID, span)
        XCTAssertTrue(parent.sampled)
        XCTAssertEqual(parent.traceState, "congo=t61rcWkgMzE")
        XCTAssertEqual(parent.header, "00-\(trace)-\(span)-01")
        XCTAssertFalse(try XCTUnwrap(TraceParent(header: "00-\(trace)-\(span)-00")).sampled)
        XCTAssertNil(try XCTUnwrap(TraceParent(header: "00-\(trace)-\(span)-01", traceState: "")).traceState)
        // §3.2.4: a later version is read by its first four fields, extra fields after them allowed.
        XCTAssertEqual(TraceParent(header: "cc-\(trace)-\(span)-01-what-the-future-holds")?.spanID, span)
    }

    func testTraceParentRejectsWhatTheSpecCallsInvalid() {
        for header in [
            "00-00000000000000000000000000000000-\(span)-01",  // all-zero trace id
            "00-\(trace)-0000000000000000-01",  // all-zero parent id
            "00-\(trace.uppercased())-\(span)-01",  // uppercase hex
            "ff-\(trace)-\(span)-01",  // version ff
            "00-\(trace)-\(span)-01-extra",  // version 00 has exactly four fields
            "00-\(trace)-\(span)",  // no flags
            "00-\(trace.dropLast())-\(span)-01",  // short trace id
            "",
        ] {
            XCTAssertNil(TraceParent(header: header), header)
        }
    }

    func testTracingIsOffUnlessAnEndpointIsSetAndNothingTurnsItOff() throws {
        XCTAssertNil(TracingConfiguration(environment: [:]))
        XCTAssertNil(TracingConfiguration(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": " "]))
        XCTAssertNil(TracingConfiguration(environment: ["OTEL_SERVICE_NAME": "svc"]))
        let endpoint = ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"]
        XCTAssertNil(TracingConfiguration(environment: endpoint.merging(["OTEL_TRACES_EXPORTER": "none"]) { $1 }))
        XCTAssertNil(TracingConfiguration(environment: endpoint.merging(["OTEL_TRACES_EXPORTER": "zipkin"]) { $1 }))
        XCTAssertNil(TracingConfiguration(environment: endpoint.merging(["OTEL_SDK_DISABLED": "true"]) { $1 }))

        let base = try XCTUnwrap(TracingConfiguration(environment: endpoint))
        XCTAssertEqual(base.tracesEndpoint, "http://collector:4318/v1/traces")
        XCTAssertEqual(base.serviceName, "unknown_service:workerctl")
        XCTAssertEqual(base.scheduleDelay, 5)
        XCTAssertNil(base.unsupportedProtocol)

        let specific = try XCTUnwrap(TracingConfiguration(environment: endpoint.merging([
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/custom", "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=billing%20jobs",
            "OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        ]) { $1 }))
        XCTAssertEqual(specific.tracesEndpoint, "http://other:4318/custom", "the signal-specific URL is used as given")
        XCTAssertEqual(specific.serviceName, "billing jobs")
        XCTAssertEqual(specific.scheduleDelay, 0.25)
        XCTAssertEqual(specific.unsupportedProtocol, "http/protobuf")
        XCTAssertEqual(TracingConfiguration(environment: endpoint.merging(["OTEL_SERVICE_NAME": "api",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=other"]) { $1 })?.serviceName, "api")
    }
}
