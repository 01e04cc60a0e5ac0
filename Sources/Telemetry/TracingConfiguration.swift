import Foundation

/// What the standard `OTEL_*` variables ask for
/// (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/ and
/// https://opentelemetry.io/docs/specs/otel/protocol/exporter/). Tracing is on only when an OTLP endpoint is
/// set and neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` turns it off.
public struct TracingConfiguration: Sendable, Equatable {
    /// Where spans are POSTed: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
    public let tracesEndpoint: String
    /// `OTEL_SERVICE_NAME`, else `service.name` from `OTEL_RESOURCE_ATTRIBUTES`, else `unknown_service:workerctl`.
    public let serviceName: String
    /// `OTEL_BSP_SCHEDULE_DELAY` (milliseconds, default 5000), in seconds.
    public let scheduleDelay: Double
    /// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` / `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds, default 10000), in seconds.
    public let timeout: Double
    /// What `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` asked for when it is not `http/json` (the only one sent).
    public let unsupportedProtocol: String?

    /// nil when tracing is off.
    public init?(environment: [String: String]) {
        func value(_ name: String) -> String? {
            guard let text = environment[name]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
            return text
        }
        if value("OTEL_SDK_DISABLED")?.lowercased() == "true" { return nil }
        if let exporters = value("OTEL_TRACES_EXPORTER")?.lowercased() {
            let names = exporters.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard names.contains("otlp") else { return nil }  // "none", or only exporters we do not have
        }
        if let endpoint = value("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            tracesEndpoint = endpoint
        } else if let base = value("OTEL_EXPORTER_OTLP_ENDPOINT") {
            tracesEndpoint = (base.hasSuffix("/") ? String(base.dropLast()) : base) + "/v1/traces"
        } else {
            return nil
        }
        serviceName = value("OTEL_SERVICE_NAME") ?? Self.resourceServiceName(value("OTEL_RESOURCE_ATTRIBUTES"))
            ?? "unknown_service:workerctl"
        scheduleDelay = (value("OTEL_BSP_SCHEDULE_DELAY").flatMap(Double.init) ?? 5000) / 1000
        timeout = (value("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT").flatMap(Double.init)
                   ?? value("OTEL_EXPORTER_OTLP_TIMEOUT").flatMap(Double.init) ?? 10000) / 1000
        let proto = value("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ?? value("OTEL_EXPORTER_OTLP_PROTOCOL")
        unsupportedProtocol = proto.flatMap { $0 == "http/json" ? nil : $0 }
    }

    /// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (`key1=value1,key2=value2`, values percent-encoded).
    static func resourceServiceName(_ attributes: String?) -> String? {
        for pair in (attributes ?? "").split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2, parts[0] == "service.name", !parts[1].isEmpty {
                return parts[1].removingPercentEncoding ?? parts[1]
            }
        }
        return nil
    }
}
