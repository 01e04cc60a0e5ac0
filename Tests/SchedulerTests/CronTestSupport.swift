import Foundation
import WorkersQueue
@testable import WorkersScheduler
import WorkersTestServices
import XCTest

/// An entry for the Redis-backed tests (queue `cron`, class `CronProbe`).
func cronEntry(_ name: String, _ cron: String, catchUp: CatchUpPolicy = .skip, tick: TickArgument = .none,
               zone: TimeZone = utcZone, args: [JSONValue] = [], enabled: Bool = true,
               queue: String = "cron", className: String = "CronProbe") throws -> ScheduleEntry {
    try ScheduleEntry(name: name, cron: try CronExpression(cron), className: className, queue: queue, args: args,
                      timeZone: zone, enabled: enabled, catchUp: catchUp, tickArgument: tick)
}

extension TestRedis {
    /// The jobs in `queue:NAME`, oldest first.
    func queued(_ queue: String = "cron") throws -> [JobPayload] {
        try payloads(list: Keys.queue(queue)).reversed()
    }

    func hashField(_ key: String, _ field: String) throws -> String? {
        try command("HGET", key, field).string
    }
}

/// Collects errors thrown on other threads so that the test thread can fail on them.
final class ThreadErrors: @unchecked Sendable {
    private let lock = NSLock()
    private var errors: [String] = []
    func record(_ error: any Error, _ context: String) { lock.withLock { errors.append("\(context): \(error)") } }
    var all: [String] { lock.withLock { errors } }
}

/// Runs `body(index)` on `count` new threads and waits for all of them.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            body(index)
            group.leave()
        }
        thread.start()
    }
    group.wait()
}

/// `count` consecutive minute ticks from `start` (which must be on a minute).
func minuteTicks(from start: Date, count: Int) -> [Date] {
    (0..<count).map { start.addingTimeInterval(Double($0) * 60) }
}

/// A value shared between threads behind a lock.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T { lock.withLock { body(&value) } }
}
