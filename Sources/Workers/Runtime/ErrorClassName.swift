import Foundation
/// The `error_class` written into Sidekiq's retry and dead records, in the form Ruby tools and
/// people read: a class path joined with `::`, without Swift's module prefix, generic parameters or
/// private discriminators; a job type's own name is replaced by its Sidekiq class name.
///
/// `Workers.FailJob.Failure` → `Fail::Failure`; `Jobs.StoreHTTPError` → `StoreHTTPError`;
/// `Swift.DecodingError` → `DecodingError`; `Jobs.(Parser in _1A2B).Problem<Swift.Int>` → `Parser::Problem`.
/// Pure functions; any thread.
enum ErrorClassName {
    /// `jobTypes`: the reflected Swift name of each registered job type (`Workers.FailJob`) → its
    /// Sidekiq class name (`Fail`), from `JobRegistry.classNamesByType`.
    static func of(_ error: any Error, jobTypes: [String: String]) -> String {
        rubyStyle(String(reflecting: type(of: error)), jobTypes: jobTypes)
    }

    static func rubyStyle(_ reflected: String, jobTypes: [String: String]) -> String {
        var path = components(of: reflected)
        guard !path.isEmpty else { return reflected }
        // The longest leading part that names a registered job type becomes its Sidekiq name.
        for length in stride(from: path.count, through: 2, by: -1) {
            let prefix = path[0..<length].joined(separator: ".")
            if let className = jobTypes[prefix] {
                path.replaceSubrange(0..<length, with: [className])
                return path.joined(separator: "::")
            }
        }
        if path.count > 1 { path.removeFirst() }  // the module
        return path.joined(separator: "::")
    }

    /// `A.B<C.D>.(E in _X).(unknown context at $1).F` → `[A, B, E, F]`: the dot-separated parts at the top
    /// level, generic arguments dropped, `(Name in _discriminator)` reduced to `Name`, unknown contexts
    /// skipped.
    static func components(of reflected: String) -> [String] {
        var parts: [String] = []
        var current = ""
        var angle = 0
        var paren = 0
        var group = ""
        func finish() {
            if !current.isEmpty { parts.append(current) }
            current = ""
        }
        for character in reflected {
            switch character {
            case "<": angle += 1
            case ">": angle = max(0, angle - 1)
            case _ where angle > 0: continue
            case "(":
                paren += 1
                if paren == 1 { group = "" } else { group.append(character) }
            case ")":
                paren = max(0, paren - 1)
                if paren == 0 {
                    // "(Name in _HASH)" names a private type; "(unknown context at $…)" and
                    // "(extension in M)" name nothing a reader needs.
                    if let range = group.range(of: " in "), !group.hasPrefix("extension") {
                        current += group[..<range.lowerBound]
                    }
                } else { group.append(character) }
            case _ where paren > 0: group.append(character)
            case ".": finish()
            case ":": finish()  // "(extension in M):Type"
            default: current.append(character)
            }
        }
        finish()
        return parts
    }
}
