import Foundation
import Synchronization
import XCTest

@testable import Workers

/// Runtime threads carry their names to the OS (what `top -H`, `perf` and a core dump show): each of 50 threads reads
/// its kernel name (`/proc/thread-self/comm`) first thing in its body. Before the fix about one thread in ten kept
/// its creator's name (Foundation dropped a name set before it had stored the thread's handle).
final class RuntimeThreadNameTests: XCTestCase {
    func testEveryRuntimeThreadHasItsNameInTheKernel() {
        let names = Mutex<[String: String]>([:])
        let group = DispatchGroup()
        for index in 0..<50 {
            let name = "rt-\(index)"
            RuntimeThread.spawn(name, group: group) {
                let seen = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
                names.withLock { $0[name] = seen }
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        let wrong = names.withLock { $0.filter { $0.key != $0.value } }
        XCTAssertTrue(wrong.isEmpty, "threads with another kernel name: \(wrong.sorted { $0.key < $1.key })")
        XCTAssertEqual(names.withLock { $0.count }, 50)
    }
}
