import Foundation
import Logging
import WorkersQueue
import Synchronization

/// Writes log records to stderr: one JSON object per line (for log shippers) or one readable
/// line (on a terminal). Secrets never reach it: callers log ids, not tokens or personal data.
/// Any thread may log; each record is written with one `write(2)` so lines never interleave.
public struct StructuredLogHandler: LogHandler {
    public enum Format: Sendable { case json, human }

    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private let format: Format

    public init(label: String, format: Format, level: Logger.Level = .info) {
        self.label = label
        self.format = format
        self.logLevel = level
    }

    /// JSON lines unless stderr is a terminal; level from `LOG_LEVEL` (default info).
    public static func bootstrap(format: Format? = nil) {
        let chosen = format ?? (isatty(STDERR_FILENO) == 1 ? .human : .json)
        let level = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0.lowercased()) } ?? .info
        LoggingSystem.bootstrap { label in StructuredLogHandler(label: label, format: chosen, level: level) }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        write(level: event.level, message: event.message, explicit: event.metadata)
    }

    private func write(level: Logger.Level, message: Logger.Message, explicit: Logger.Metadata?) {
        var merged = metadata
        if let explicit { merged.merge(explicit) { $1 } }
        let now = Date()
        var text: String
        switch format {
        case .json:
            var object: [(String, String)] = [("ts", Self.iso8601(now)), ("level", level.rawValue),
                                              ("logger", label), ("msg", message.description)]
            for key in merged.keys.sorted() { object.append((key, "\(merged[key]!)")) }
            text = "{" + object.map { Self.quote($0.0) + ":" + Self.quote($0.1) }.joined(separator: ",") + "}\n"
        case .human:
            let fields = merged.keys.sorted().map { "\($0)=\(merged[$0]!)" }.joined(separator: " ")
            text = "\(Self.iso8601(now)) \(level.rawValue.uppercased()) \(message)\(fields.isEmpty ? "" : " " + fields)\n"
        }
        // A value in a message or a field (a queue name, an error from Redis) cannot drive the reader's terminal or
        // forge a second line: control and format characters, newlines included, are shown as `\uXXXX`.
        text = DisplayText.neutralised(String(text.dropLast()), keeping: []) + "\n"
        text.withUTF8 { buffer in _ = Glibc.write(STDERR_FILENO, buffer.baseAddress, buffer.count) }
    }

    /// A JSON string literal (the one JSON writer of the project).
    private static func quote(_ text: String) -> String { JSONValue.string(text).serialized() }

    private static func iso8601(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let millis = Int(date.timeIntervalSince1970 * 1000) % 1000
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), millis)
    }
}
