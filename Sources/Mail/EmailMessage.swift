import Foundation
import WorkersHTTP

/// A mailbox: `address` plus an optional display name.
public struct EmailAddress: Sendable, Equatable, CustomStringConvertible {
    public var address: String
    public var name: String?

    public init(_ address: String, name: String? = nil) {
        self.address = address
        self.name = name
    }

    public var description: String { headerValue }

    /// `"Name" <addr>` (name RFC 2047-encoded when not ASCII) or `<addr>`.
    var headerValue: String {
        guard let name, !name.isEmpty else { return "<\(address)>" }
        if name.unicodeScalars.allSatisfy({ $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F }) {
            let quoted = name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            return "\"\(quoted)\" <\(address)>"
        }
        return "\(MIMEEncoding.encodedWords(name).joined(separator: " ")) <\(address)>"
    }

    /// A plausible `local@domain` with no characters that could break a header or an SMTP command.
    var isValid: Bool {
        let parts = address.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
            && !address.contains(where: { $0.isWhitespace || $0.isNewline || "<>(),;:\"\\".contains($0) })
            && !(name ?? "").containsLineBreakOrNUL
    }
}

/// One plain-text email (RFC 5322 + MIME, UTF-8).
///
/// Invariants enforced by `rendered()`: at least one recipient; every address valid; no CR/LF in header values
/// (no header injection); `messageID` is `<id@domain>` (angle brackets added if missing). The caller supplies
/// `messageID` so that a retried job sends the *same* message (receivers can de-duplicate on it).
public struct EmailMessage: Sendable {
    public var from: EmailAddress
    public var to: [EmailAddress]
    public var cc: [EmailAddress]
    /// Envelope-only recipients: never written into the headers.
    public var bcc: [EmailAddress]
    public var replyTo: EmailAddress?
    public var subject: String
    public var messageID: String
    public var date: Date
    public var textBody: String
    /// Extra header fields (e.g. `List-Unsubscribe`, `X-Export-Id`), written after the standard ones.
    public var extraHeaders: [(String, String)]

    public init(from: EmailAddress, to: [EmailAddress], cc: [EmailAddress] = [], bcc: [EmailAddress] = [],
                replyTo: EmailAddress? = nil, subject: String, messageID: String, date: Date = Date(),
                textBody: String, extraHeaders: [(String, String)] = []) {
        self.from = from
        self.to = to
        self.cc = cc
        self.bcc = bcc
        self.replyTo = replyTo
        self.subject = subject
        self.messageID = messageID
        self.date = date
        self.textBody = textBody
        self.extraHeaders = extraHeaders
    }

    /// Every envelope recipient (to + cc + bcc), bare addresses.
    public var envelopeRecipients: [String] { (to + cc + bcc).map(\.address) }

    /// `<id>` form of `messageID`.
    public var normalizedMessageID: String {
        let trimmed = messageID.trimmingCharacters(in: .whitespaces)
        return trimmed.hasPrefix("<") ? trimmed : "<\(trimmed)>"
    }

    /// The message as it goes over the wire: CRLF line endings, headers, blank line, body.
    /// (libcurl does the SMTP dot-stuffing and adds the terminating `.`.)
    public func rendered() throws(SMTPError) -> Data {
        try validate()
        var lines: [String] = []
        lines.append("Date: \(MIMEEncoding.rfc5322Date(date))")
        lines.append("From: \(from.headerValue)")
        lines.append("To: \(to.map(\.headerValue).joined(separator: ", "))")
        if !cc.isEmpty { lines.append("Cc: \(cc.map(\.headerValue).joined(separator: ", "))") }
        if let replyTo { lines.append("Reply-To: \(replyTo.headerValue)") }
        lines.append("Message-ID: \(normalizedMessageID)")
        lines.append("Subject: \(MIMEEncoding.headerText(subject))")
        lines.append("MIME-Version: 1.0")
        lines.append("Content-Type: text/plain; charset=UTF-8")
        let (encoding, body) = MIMEEncoding.body(textBody)
        lines.append("Content-Transfer-Encoding: \(encoding)")
        for (name, value) in extraHeaders { lines.append("\(name): \(MIMEEncoding.headerText(value))") }
        return Data((lines.joined(separator: "\r\n") + "\r\n\r\n" + body).utf8)
    }

    private func validate() throws(SMTPError) {
        if to.isEmpty && cc.isEmpty && bcc.isEmpty { throw .invalidMessage("no recipients") }
        for a in [from] + to + cc + bcc + (replyTo.map { [$0] } ?? []) where !a.isValid {
            throw .invalidMessage("invalid address '\(a.address)'")
        }
        let id = normalizedMessageID
        if id.count < 3 || !id.hasSuffix(">") || id.dropFirst().dropLast().contains(where: {
            $0.isWhitespace || $0 == "<" || $0 == ">" || !$0.isASCII
        }) {
            throw .invalidMessage("invalid Message-ID")
        }
        if subject.containsLineBreakOrNUL { throw .invalidMessage("CR/LF in Subject") }
        for (name, value) in extraHeaders {
            if name.isEmpty || name.contains(where: { $0 == ":" || $0.isWhitespace || !$0.isASCII })
                || value.containsLineBreakOrNUL {
                throw .invalidMessage("invalid header '\(name)'")
            }
        }
    }
}

/// Header and body encodings for `EmailMessage` (RFC 2047, RFC 2045 quoted-printable, RFC 5322 dates).
enum MIMEEncoding {
    /// `Tue, 15 Nov 1994 08:12:31 +0000` (always UTC).
    static func rfc5322Date(_ date: Date) -> String {
        var cal = Calendar(identifier: .gregorian)
        cal.timeZone = TimeZone(identifier: "UTC")!
        let c = cal.dateComponents([.year, .month, .day, .hour, .minute, .second, .weekday], from: date)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ v: Int?) -> String { let v = v ?? 0; return v < 10 ? "0\(v)" : "\(v)" }
        return "\(days[(c.weekday ?? 1) - 1]), \(two(c.day)) \(months[(c.month ?? 1) - 1]) \(c.year ?? 1970) "
            + "\(two(c.hour)):\(two(c.minute)):\(two(c.second)) +0000"
    }

    /// ASCII text as is; anything else as RFC 2047 B-encoded words folded onto continuation lines.
    static func headerText(_ s: String) -> String {
        if s.unicodeScalars.allSatisfy({ $0.isASCII && ($0.value >= 0x20 || $0 == "\t") && $0.value != 0x7F }) {
            return s
        }
        return encodedWords(s).joined(separator: "\r\n ")
    }

    /// `=?UTF-8?B?...?=` words of at most 75 characters, never splitting a character.
    static func encodedWords(_ s: String) -> [String] {
        var words: [String] = []
        var chunk = Data()
        for ch in s {
            let bytes = Data(String(ch).utf8)
            if chunk.count + bytes.count > 45 {
                words.append("=?UTF-8?B?\(chunk.base64EncodedString())?=")
                chunk = Data()
            }
            chunk.append(bytes)
        }
        if !chunk.isEmpty || words.isEmpty { words.append("=?UTF-8?B?\(chunk.base64EncodedString())?=") }
        return words
    }

    /// The body with CRLF line endings, as `7bit` when it is short-lined ASCII, else `quoted-printable`.
    static func body(_ text: String) -> (encoding: String, body: String) {
        let normalized = text.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n")
        var lines = normalized.components(separatedBy: "\n")
        if lines.last == "" { lines.removeLast() }
        let plain = lines.allSatisfy { line in
            line.utf8.count <= 998 && line.unicodeScalars.allSatisfy { $0.isASCII && $0 != "\0" }
        }
        if plain { return ("7bit", lines.map { $0 + "\r\n" }.joined()) }
        return ("quoted-printable", lines.map { quotedPrintable($0) + "\r\n" }.joined())
    }

    /// One line quoted-printable encoded, soft-wrapped at 76 characters.
    static func quotedPrintable(_ line: String) -> String {
        let hex = Array("0123456789ABCDEF")
        let bytes = Array(line.utf8)
        var out = ""
        var width = 0
        for (i, b) in bytes.enumerated() {
            let isLast = i == bytes.count - 1
            var token: String
            if (b >= 33 && b <= 126 && b != UInt8(ascii: "=")) || ((b == 0x20 || b == 0x09) && !isLast) {
                token = String(UnicodeScalar(b))
            } else {
                token = "=\(hex[Int(b >> 4)])\(hex[Int(b & 0xF)])"
            }
            if width + token.count > 75 {
                out += "=\r\n"
                width = 0
            }
            out += token
            width += token.count
        }
        return out
    }
}
