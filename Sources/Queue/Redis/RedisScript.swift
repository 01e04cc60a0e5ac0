import Crypto
import Foundation

/// A Lua script with its SHA-1, for `EVALSHA`.
package struct RedisScript: Sendable {
    public let source: String
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        // SHA-1 because Redis names scripts by it (not used for anything secret).
        self.sha1 = Insecure.SHA1.hash(data: Array(source.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
