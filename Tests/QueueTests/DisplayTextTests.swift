import Foundation
import WorkersQueue
import XCTest

/// Text from Redis shown to a human (issue 51 point 5): control and format characters are shown as escapes, never
/// passed to the terminal or the page; progress notes are bounded in bytes and hold neither.
final class DisplayTextTests: XCTestCase {
    /// Every scalar a terminal or a bidi algorithm acts on, and ordinary text around them.
    static let hostile = "a\u{1B}[2Jb\u{7}c\u{9B}d\u{202E}gnp.exe\u{202C}\u{2066}e\u{2069}\u{200B}f\u{200D}\u{FEFF}g\u{2028}h\u{E0001}i\u{AD}j\r\nk\tl"

    func testNeutralisedTextHoldsNoControlOrFormatCharacterAndStaysValidJSON() throws {
        let shown = DisplayText.neutralised(Self.hostile)
        XCTAssertFalse(shown.unicodeScalars.contains { DisplayText.isUnsafe($0) && $0 != "\n" && $0 != "\t" }, shown)
        XCTAssertTrue(shown.contains("\\u001B[2Jb") && shown.contains("\\u202E") && shown.contains("\\uDB40\\uDC01"), shown)
        XCTAssertTrue(shown.contains("\n") && shown.contains("\t"), "newline and tab are kept")
        let plain = "queue:default ValidateReceiptJob éàü 日本 🙂"
        XCTAssertEqual(DisplayText.neutralised(plain), plain, "ordinary text unchanged")
        // On a line of JSON the escapes are JSON's own: it still parses, to the original text.
        let line = JSONValue.object(["msg": .string(Self.hostile)]).serialized()
        let parsed = try JSONValue.parse(DisplayText.neutralised(line, keeping: []))
        XCTAssertEqual(parsed.objectValue?["msg"]?.stringValue, Self.hostile)
    }

    func testProgressNotesAreBoundedInBytesWithoutControlOrFormatCharacters() throws {
        let zalgo = "e" + String(repeating: "\u{301}", count: 100_000)  // one character of 200,001 bytes
        XCTAssertNil(JobProgress(fraction: 0.5, note: zalgo, at: Date())?.note, "a character over the limit is not cut inside")
        let note = try XCTUnwrap(JobProgress(fraction: 0.5, note: Self.hostile + String(repeating: "日", count: 500), at: Date())?.note)
        XCTAssertLessThanOrEqual(note.utf8.count, JobProgress.maxNoteBytes)
        XCTAssertFalse(note.unicodeScalars.contains(where: DisplayText.isUnsafe), note)
        // Each character holding an unsafe scalar goes whole ("f" joined to U+200D with it).
        XCTAssertTrue(note.hasPrefix("a[2Jbcdgnp.exeeghijkl日"), note)
    }
}
