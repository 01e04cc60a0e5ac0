import Foundation
import WorkersFuzzTargets

// The fuzz harnesses as a program (docs/fuzzing.md).
//
// Built normally (`swift build`): a replayer, `FuzzRunner <harness> <file>...`, which feeds each file to the
// harness and writes `ok <file>` (unbuffered) after each one it survived, so a caller that sees the process die
// knows which file killed it. The corpus replay test (Tests/FuzzTests) runs it.
//
// Built with `-Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer` (bench/fuzz.sh): no `main` of its own; libFuzzer's
// `main` calls `LLVMFuzzerTestOneInput` below with each input, for the harness named by `FUZZ_HARNESS`.

/// Writes `text` and a newline to a standard stream, unbuffered.
func say(_ text: String, to handle: FileHandle = .standardOutput) {
    handle.write(Data((text + "\n").utf8))
}

#if FUZZING
/// The harness `FUZZ_HARNESS` names, looked up once; the process exits 2 (with the list) when there is none.
enum Selected {
    static let harness: FuzzHarness = {
        let name = ProcessInfo.processInfo.environment["FUZZ_HARNESS"] ?? ""
        guard let harness = FuzzHarnesses.named(name) else {
            say("FUZZ_HARNESS must be one of: \(FuzzHarnesses.all.map(\.name).joined(separator: " "))", to: .standardError)
            exit(2)
        }
        return harness
    }()
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let bytes = start.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
    Selected.harness.run(bytes)
    return 0
}

/// libFuzzer's driver (its `main` is a call to it), declared here: no C header needed.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

/// The program's entry on Linux: SwiftPM links an executable target with `main` = `<module>_main` (so tests can
/// link the module), which leaves libFuzzer's own `main` out; this one hands over to libFuzzer's driver.
@_cdecl("FuzzRunner_main")
public func fuzzRunnerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { start, size in fuzzTestOneInput(start, size) }
}
#else
@main
struct FuzzRunner {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let harness = FuzzHarnesses.named(name) else {
            say("usage: FuzzRunner <harness> <file>...   (replays each file through the harness)")
            for harness in FuzzHarnesses.all { say("  \(harness.name): \(harness.summary)") }
            exit(arguments.first == "--list" ? 0 : 2)
        }
        for path in arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else {
                say("cannot read \(path)", to: .standardError)
                exit(3)
            }
            harness.run([UInt8](data))
            say("ok \(path)")
        }
    }
}
#endif
