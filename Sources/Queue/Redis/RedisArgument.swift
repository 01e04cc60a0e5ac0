import Foundation

/// Something that can be sent as one argument of a Redis command.
public protocol RedisArgument: Sendable {
    func appendRedisBytes(to buffer: inout [UInt8])
}

extension String: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
}

extension Substring: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
}

extension Array: RedisArgument where Element == UInt8 {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: self) }
}

extension Int: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: String(self).utf8) }
}

extension Int64: RedisArgument {
    public func appendRedisBytes(to buffer: inout [UInt8]) { buffer.append(contentsOf: String(self).utf8) }
}

extension Double: RedisArgument {
    /// Scores and timestamps are written the way Ruby's `Float#to_s` writes them.
    public func appendRedisBytes(to buffer: inout [UInt8]) {
        buffer.append(contentsOf: JSONValue.rubyFloat(self).utf8)
    }
}
