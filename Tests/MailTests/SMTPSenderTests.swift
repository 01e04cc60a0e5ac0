import Foundation
import WorkersMail
import WorkersTestServices
import XCTest

/// `SMTPSender` against the fake SMTP server in `Tests/Fakes/fakes.py`.
final class SMTPSenderTests: XCTestCase {
    private var fakes: FakeServers!

    override func setUpWithError() throws {
        fakes = try FakeServers.shared()
        try fakes.reset(.smtp)
    }

    private func sender(security: SMTPSecurity = .none, username: String? = nil, password: String? = nil,
                        timeout: Duration = .seconds(10), port: Int? = nil) -> SMTPSender {
        SMTPSender(configuration: SMTPConfiguration(
            host: "127.0.0.1", port: port ?? fakes.smtpPort, security: security, username: username,
            password: password, localDomain: "workers.example.com", connectTimeout: .seconds(2), timeout: timeout))
    }

    private func message(id: String = "export-1@workers.example.com") -> EmailMessage {
        EmailMessage(
            from: EmailAddress("noreply@example.com", name: "Example"),
            to: [EmailAddress("user@example.org", name: "Zoé Martin")],
            bcc: [EmailAddress("audit@example.com")],
            subject: "Your data export is ready",
            messageID: id,
            date: Date(timeIntervalSince1970: 1_700_000_000),
            textBody: "Hello,\n\nDownload: https://example.com/exports/1?sig=abc\n.\n..two dots\nBye\n")
    }

    func testMessageIsDelivered() throws {
        try sender().send(message())
        let messages = try fakes.smtpMessages()
        XCTAssertEqual(messages.count, 1)
        let m = try XCTUnwrap(messages.first)
        XCTAssertEqual(m.mailFrom, "noreply@example.com")
        XCTAssertEqual(m.rcptTo, ["user@example.org", "audit@example.com"])
        XCTAssertEqual(m.subject, "Your data export is ready")
        XCTAssertEqual(m.messageID, "<export-1@workers.example.com>")
        XCTAssertEqual(m.header("Date"), "Tue, 14 Nov 2023 22:13:20 +0000")
        XCTAssertEqual(m.header("From"), "\"Example\" <noreply@example.com>")
        XCTAssertNil(m.header("Bcc"))
        XCTAssertEqual(m.body, "Hello,\r\n\r\nDownload: https://example.com/exports/1?sig=abc\r\n.\r\n..two dots\r\nBye\r\n",
                       "dot-stuffing must round-trip lines that start with '.'")
        XCTAssertNil(m.authUser)
    }

    func testAuthenticatesWhenCredentialsGiven() throws {
        try fakes.configure(.smtp, ["username": "mailer", "password": "pw"])
        try sender(username: "mailer", password: "pw").send(message())
        XCTAssertEqual(try fakes.smtpMessages().first?.authUser, "mailer")

        XCTAssertThrowsError(try sender(username: "mailer", password: "wrong").send(message())) { error in
            guard case SMTPError.authenticationFailed(let c) = error else { return XCTFail("\(error)") }
            XCTAssertFalse("\(c)".contains("wrong"), "no credentials in errors")
            XCTAssertFalse((error as? SMTPError)?.isRetryable ?? true)
        }
    }

    func testTransientAndPermanentReplies() throws {
        try fakes.script(.smtp, ["match": ["stage": "rcpt"], "status": 450, "message": "4.2.1 Mailbox busy"])
        XCTAssertThrowsError(try sender().send(message())) { error in
            guard case SMTPError.transientReply(let code, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(code, 450)
            XCTAssertTrue((error as? SMTPError)?.isRetryable ?? false)
        }
        try fakes.script(.smtp, ["match": ["stage": "mail"], "status": 550, "message": "5.7.1 Sender rejected"])
        XCTAssertThrowsError(try sender().send(message())) { error in
            guard case SMTPError.permanentReply(let code, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(code, 550)
            XCTAssertFalse((error as? SMTPError)?.isRetryable ?? true)
        }
        try fakes.script(.smtp, ["match": ["stage": "eom"], "status": 452, "message": "4.3.1 Insufficient storage"])
        XCTAssertThrowsError(try sender().send(message())) { error in
            XCTAssertTrue((error as? SMTPError)?.isRetryable ?? false, "\(error)")
        }
        XCTAssertEqual(try fakes.smtpMessages().count, 0)
    }

    func testRequiredSTARTTLSNotOfferedIsTLSError() throws {
        XCTAssertThrowsError(try sender(security: .startTLS).send(message())) { error in
            guard case SMTPError.tls = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(try fakes.smtpMessages().count, 0)
        // Opportunistic STARTTLS falls back to plain text.
        try sender(security: .startTLSIfAvailable).send(message())
        XCTAssertEqual(try fakes.smtpMessages().count, 1)
    }

    func testTimeoutAndConnectionRefused() throws {
        try fakes.script(.smtp, ["match": ["stage": "connect"], "hang": true, "delay": 10])
        // The fake greets after 10 s: only the 1 s timeout can make this a `.timeout`.
        XCTAssertThrowsError(try sender(timeout: .seconds(1)).send(message())) { error in
            guard case SMTPError.timeout = error else { return XCTFail("\(error)") }
            XCTAssertTrue((error as? SMTPError)?.isRetryable ?? false)
        }

        XCTAssertThrowsError(try sender(port: 1).send(message())) { error in
            guard case SMTPError.connectionRefused = error else { return XCTFail("\(error)") }
        }
    }

    func testInvalidMessageIsRejectedBeforeConnecting() {
        var m = message()
        m.to = [EmailAddress("user@example.org>\r\nRCPT TO:<victim@example.com")]
        XCTAssertThrowsError(try sender().send(m)) { error in
            guard case SMTPError.invalidMessage = error else { return XCTFail("\(error)") }
        }
    }
}
