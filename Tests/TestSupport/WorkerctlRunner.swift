import Foundation
import WorkersQueue

/// Runs the built `workerctl` binary against a test Redis database and parses its output.
public struct WorkerctlRunner: Sendable {
    public let redisURL: String

    public init(redisURL: String) { self.redisURL = redisURL }

    public struct Result: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String

        /// stdout parsed as one JSON document (nil if it is not JSON).
        public var json: JSONValue? { try? JSONValue.parse(stdout.trimmingCharacters(in: .whitespacesAndNewlines)) }
        public var object: JSONObject? { json?.objectValue }
    }

    /// Runs `workerctl ARGUMENTS` with `REDIS_URL` set to this database (stdin is /dev/null, so
    /// it is not a terminal).
    @discardableResult
    public func run(_ arguments: [String], environment: [String: String] = [:], timeout: Double = 60) throws -> Result {
        let result = try ChildProcess.run(TestServices.workerctl, arguments,
                                          environment: ["REDIS_URL": redisURL].merging(environment) { $1 }, timeout: timeout)
        return Result(status: result.status, stdout: result.stdout, stderr: result.stderr)
    }

    public func run(_ arguments: String...) throws -> Result { try run(arguments) }
}

/// Runs Ruby with Sidekiq 6.4.1 loaded and connected to a test database.
public enum RubySidekiq {
    public static var isAvailable: Bool { TestServices.which("ruby") != nil }

    /// Runs `code` after `require "sidekiq/api"` and `Sidekiq.redis = {url: REDIS_URL}`.
    public static func run(_ code: String, redisURL: String) throws -> (status: Int32, stdout: String, stderr: String) {
        guard let ruby = TestServices.which("ruby") else { return (127, "", "ruby is not installed") }
        let script = """
            require "json"; require "sidekiq"; require "sidekiq/api"
            Sidekiq.logger.level = Logger::WARN
            Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
            Sidekiq.redis = {url: ENV["REDIS_URL"], size: 2}
            \(code)
            """
        return try ChildProcess.run(ruby, ["-e", script], environment: ["REDIS_URL": redisURL])
    }

    /// The interop script (`TestServices.interopScript`) with `arguments`.
    public static func interop(_ arguments: [String], redisURL: String) throws -> (status: Int32, stdout: String, stderr: String) {
        guard let ruby = TestServices.which("ruby") else { return (127, "", "ruby is not installed") }
        let script = TestServices.interopScript
        return try ChildProcess.run(ruby, [script.path] + arguments, environment: ["REDIS_URL": redisURL])
    }
}
