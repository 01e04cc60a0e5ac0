import Foundation

/// A configuration variable that is present but unusable. Thrown by the Geo and Ads
/// `fromEnvironment` functions; the message names the variable but never echoes a secret.
public struct GeoAdsConfigurationError: Error, Sendable, CustomStringConvertible {
    public let variable: String
    public let reason: String
    public init(variable: String, reason: String) {
        self.variable = variable
        self.reason = reason
    }
    public var description: String { "\(variable): \(reason)" }
}

/// Reads typed values from an environment dictionary. Empty values count as unset.
struct GeoAdsEnvironment {
    let values: [String: String]

    init(_ values: [String: String]) { self.values = values }

    func string(_ name: String) -> String? {
        guard let value = values[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else { return nil }
        return value
    }

    func string(_ name: String, default fallback: String) -> String { string(name) ?? fallback }

    func double(_ name: String, default fallback: Double, range: ClosedRange<Double>) throws(GeoAdsConfigurationError) -> Double {
        guard let text = string(name) else { return fallback }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            throw GeoAdsConfigurationError(variable: name, reason: "expected a number within \(range.lowerBound)...\(range.upperBound), got '\(text)'")
        }
        return value
    }

    func int(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws(GeoAdsConfigurationError) -> Int {
        guard let text = string(name) else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw GeoAdsConfigurationError(variable: name, reason: "expected an integer within \(range.lowerBound)...\(range.upperBound), got '\(text)'")
        }
        return value
    }

    /// An http(s) base URL without a trailing slash.
    func url(_ name: String, default fallback: String) throws(GeoAdsConfigurationError) -> String {
        let text = string(name) ?? fallback
        guard text.hasPrefix("http://") || text.hasPrefix("https://") else {
            throw GeoAdsConfigurationError(variable: name, reason: "expected an http:// or https:// URL")
        }
        return text.hasSuffix("/") ? String(text.dropLast()) : text
    }

    /// A secret given directly (`NAME`) or in a file (`NAME_FILE`): `EnvironmentSecret`.
    func secret(_ name: String) throws(GeoAdsConfigurationError) -> String? {
        do { return try EnvironmentSecret.readText(name, from: values) } catch {
            switch error {
            case .bothSet: throw GeoAdsConfigurationError(variable: name, reason: "set \(name) or \(name)_FILE, not both")
            case .unreadable(let variable, _, _): throw GeoAdsConfigurationError(variable: variable, reason: "cannot read the file it names")
            }
        }
    }
}

/// UUID text as sent in job arguments: parsed leniently (any case), or nil.
enum GeoAdsIdentifier {
    static func uuid(_ text: String) -> UUID? { UUID(uuidString: text) }
}

/// A job stopped between two steps because it passed its timeout or the process is stopping.
/// Thrown like any other error: the job is retried and resumes where the data says it stopped.
public struct GeoAdsCancelled: Error, Sendable, CustomStringConvertible {
    public let job: String
    public init(job: String) { self.job = job }
    public var description: String { "\(job) cancelled between batches (timeout or shutdown)" }
}
