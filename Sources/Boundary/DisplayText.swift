/// Text from outside the process (a payload, a job's error, a progress note, a class or queue name) on its way to a
/// human: a terminal, a log line, a page. A control character (C0, DEL, C1) can move a terminal's cursor, rewrite
/// lines or set its title; a format character (bidi overrides and isolates such as U+202E, zero-width joiners, tag
/// characters: Unicode category Cf) and the line/paragraph separators make text show other than it is ("Trojan
/// Source"). `neutralised` shows each such scalar as its escape `\uXXXX` instead, which is also a valid JSON escape
/// (a scalar above U+FFFF as its UTF-16 pair), so it can be applied to a line of JSON without breaking it.
///
/// Invariant: `neutralised(t)` contains no unsafe scalar except `kept` ones (newline and tab by default); text
/// without unsafe scalars is returned unchanged. Pure functions; any thread.
public enum DisplayText {
    /// True for a scalar that changes how a terminal or a page shows other text (see the type).
    public static func isUnsafe(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x20...0x7E: return false  // printable ASCII: the fast path
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029: return true
        case 0xA0...0x2FF: return scalar.value == 0xAD  // soft hyphen (Cf)
        default: return scalar.properties.generalCategory == .format || scalar.properties.generalCategory == .control
        }
    }

    /// `text` with every unsafe scalar but those in `kept` written as `\uXXXX`.
    public static func neutralised(_ text: String, keeping kept: Set<Unicode.Scalar> = ["\n", "\t"]) -> String {
        guard text.unicodeScalars.contains(where: { isUnsafe($0) && !kept.contains($0) }) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard isUnsafe(scalar), !kept.contains(scalar) else { out.append(scalar); continue }
            for unit in String(scalar).utf16 {
                let hex = String(unit, radix: 16, uppercase: true)
                out.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
            }
        }
        return String(out)
    }

    /// `text` without its unsafe scalars (each character holding one is dropped whole), cut to at most `maxBytes`
    /// bytes of UTF-8 at a character boundary; nil when nothing is left.
    public static func bounded(_ text: String, maxBytes: Int) -> String? {
        var out = ""
        var bytes = 0
        for character in text {
            if character.unicodeScalars.contains(where: isUnsafe) { continue }
            let size = character.utf8.count
            if bytes + size > maxBytes { break }
            out.append(character)
            bytes += size
        }
        return out.isEmpty ? nil : out
    }
}
