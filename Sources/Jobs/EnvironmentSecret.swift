import Foundation

/// Where every area's configuration secrets come from: the variable `NAME` itself, or the file
/// the variable `NAME_FILE` names (surrounding whitespace and newlines dropped, as editors and
/// `echo` leave a trailing newline). Setting both is refused, so it is never unclear which wins.
/// Empty values count as unset. The secret's value never appears in an error.
enum EnvironmentSecret {
    enum Failure: Error, Sendable {
        /// Both `NAME` and `NAME_FILE` are set.
        case bothSet(variable: String)
        /// `NAME_FILE` names a file that cannot be read.
        case unreadable(variable: String, path: String, reason: String)
    }

    static func read(_ name: String, from env: [String: String]) throws(Failure) -> Data? {
        let direct = env[name].flatMap { $0.isEmpty ? nil : $0 }
        let path = env[name + "_FILE"]?.trimmingCharacters(in: .whitespaces)
        let file = (path?.isEmpty ?? true) ? nil : path
        if direct != nil && file != nil { throw .bothSet(variable: name) }
        if let direct { return Data(direct.utf8) }
        guard let file else { return nil }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
            throw .unreadable(variable: name + "_FILE", path: file, reason: (error as NSError).localizedDescription)
        }
        let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]
        let trimmed = data.drop { whitespace.contains($0) }.reversed().drop { whitespace.contains($0) }.reversed()
        return trimmed.isEmpty ? nil : Data(trimmed)
    }

    static func readText(_ name: String, from env: [String: String]) throws(Failure) -> String? {
        try read(name, from: env).map { String(decoding: $0, as: UTF8.self) }
    }
}
