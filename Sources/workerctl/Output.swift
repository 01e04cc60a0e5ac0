import Foundation
import WorkersQueue

// The one way `workerctl` writes to its terminal (issue 51 point 5). Text read from Redis — payloads, error messages,
// progress notes, class, queue and host names — can hold control and format characters that would drive the
// operator's terminal (move the cursor, rewrite lines, set the title) or make text show other than it is (bidi
// overrides). Everything written here is `DisplayText.neutralised` first: such characters appear as `\uXXXX`, which
// is also a valid JSON escape, so `--json` output stays valid. `scripts/check-sources` fails a write to standard
// output or standard error anywhere else in this module.

/// `Swift.print`, neutralised: in this module it shadows the standard library's `print` at every call site.
func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    Swift.print(DisplayText.neutralised(items.map { "\($0)" }.joined(separator: separator)), terminator: terminator)
}

/// A message on standard error, neutralised.
/// On stderr (stdout stays the table or JSON it was): a read stopped at its budget (issue 51, review M5), e.g.
/// "partial: showing 1000 of ≥ 200000 queues".
func printPartial(_ text: String) { printError("partial: " + text) }

func printError(_ text: String, terminator: String = "\n") {
    FileHandle.standardError.write(Data((DisplayText.neutralised(text) + terminator).utf8))
}

/// Terminal control sequences of our own (`top`'s screen handling, a progress line's carriage return), written as
/// they are to `fd` (1 or 2). `text` must hold nothing read from Redis: pass such text through `DisplayText` first.
enum TerminalControl {
    static func write(_ text: String, to fd: Int32) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written <= 0 { return }
            offset += written
        }
    }
}
