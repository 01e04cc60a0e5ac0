import Foundation
import WorkersMail
import XCTest

/// `EmailMessage` rendering and refusals: pure value tests, no network.
final class EmailMessageTests: XCTestCase {
    func testEmailRendering() throws {
        let m = EmailMessage(
            from: EmailAddress("noreply@example.com", name: "Example \"App\""),
            to: [EmailAddress("user@example.org")], bcc: [EmailAddress("audit@example.com")],
            subject: "Your data export is ready", messageID: "export-42@example.com",
            date: Date(timeIntervalSince1970: 0), textBody: "Hello,\nline two\n.starts with dot\n")
        let text = String(decoding: try m.rendered(), as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("Date: Thu, 01 Jan 1970 00:00:00 +0000\r\n"), text)
        XCTAssertTrue(text.contains("From: \"Example \\\"App\\\"\" <noreply@example.com>\r\n"))
        XCTAssertTrue(text.contains("To: <user@example.org>\r\n"))
        XCTAssertFalse(text.contains("audit@example.com"), "Bcc must stay out of the headers")
        XCTAssertTrue(text.contains("Message-ID: <export-42@example.com>\r\n"))
        XCTAssertTrue(text.contains("Content-Transfer-Encoding: 7bit\r\n"))
        XCTAssertTrue(text.hasSuffix("\r\n\r\nHello,\r\nline two\r\n.starts with dot\r\n"))
        XCTAssertFalse(text.replacingOccurrences(of: "\r\n", with: "").contains("\n"), "bare LF")
        XCTAssertEqual(m.envelopeRecipients, ["user@example.org", "audit@example.com"])
    }

    func testEmailNonASCIIAndInjection() throws {
        var m = EmailMessage(from: EmailAddress("a@x.org"), to: [EmailAddress("b@y.org", name: "Zoé")],
                             subject: "Export prêt ✓", messageID: "<m1@x.org>", textBody: "Voilà = 100 %")
        let text = String(decoding: try m.rendered(), as: UTF8.self)
        XCTAssertTrue(text.contains("Subject: =?UTF-8?B?"), text)
        XCTAssertTrue(text.contains("To: =?UTF-8?B?"), text)
        XCTAssertTrue(text.contains("Content-Transfer-Encoding: quoted-printable"))
        XCTAssertTrue(text.contains("Voil=C3=A0 =3D 100 %"), text)
        m.subject = "hi\r\nBcc: victim@example.com"
        XCTAssertThrowsError(try m.rendered()) { e in
            guard case SMTPError.invalidMessage = e else { return XCTFail("\(e)") }
        }
        m.subject = "ok"
        m.to = [EmailAddress("bad address@x.org")]
        XCTAssertThrowsError(try m.rendered())
        m.to = []
        XCTAssertThrowsError(try m.rendered())
    }
}
