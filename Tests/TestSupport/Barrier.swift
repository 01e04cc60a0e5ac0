import Foundation

/// A reusable barrier for `count` threads: each `wait` returns once all `count` have arrived, round after round.
/// Any thread may call `wait`; `condition` guards `arrived` and `generation`.
public final class Barrier: @unchecked Sendable {
    private let condition = NSCondition()
    private let count: Int
    private var arrived = 0
    private var generation = 0

    public init(_ count: Int) { self.count = count }

    public func wait() {
        condition.lock()
        defer { condition.unlock() }
        let current = generation
        arrived += 1
        if arrived == count {
            arrived = 0
            generation += 1
            condition.broadcast()
            return
        }
        while generation == current { condition.wait() }
    }
}
