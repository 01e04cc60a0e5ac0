import Foundation
import Logging
import WorkersMail
import WorkersStorage
import Workers

/// The export-ready email: built from the export row only, so every attempt for one export renders the
/// same message (same Message-ID, Date, subject and link).
public struct ExportMail: Sendable {
    public let exportID: UUID
    public let url: String
    public let expiresAt: Date
    public let completedAt: Date

    /// `<privacy-export.<export_id>@<domain of From>>`: stable per export, so a resend after a crash is
    /// recognisably the same message.
    public static func messageID(exportID: UUID, domain: String) -> String {
        "<privacy-export.\(exportID.uuidString.lowercased())@\(domain)>"
    }

    public func message(to recipient: String, configuration: PrivacyConfiguration) -> EmailMessage {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "d MMMM yyyy 'at' HH:mm 'UTC'"
        let body = """
            Hello,

            The copy of your personal data that you requested is ready. Download it here:

            \(url)

            This link is valid until \(formatter.string(from: expiresAt)); after that the file is deleted and you
            can request a new export from the app.

            The file is a JSON document (machine-readable, as GDPR Art. 20 asks) with one section per kind of data.
            If you did not request this export, please contact our support.
            """
        return EmailMessage(from: configuration.mailFrom, to: [EmailAddress(recipient)],
                            subject: "Your data export is ready",
                            messageID: Self.messageID(exportID: exportID, domain: configuration.mailDomain),
                            date: completedAt, textBody: body,
                            extraHeaders: [("X-Privacy-Export-Id", exportID.uuidString.lowercased())])
    }
}

/// Sends the export mail at most once per export under normal operation, recording intent before sending.
///
/// Protocol on `privacy_exports` (one row per export):
/// 1. `email_sent_at` set → done, nothing is sent.
/// 2. Claim: `email_intent_at = now()` (+ `email_message_id`) only if no run holds a fresh claim (younger than
///    the lease, which outlasts one SMTP session). A fresh foreign claim → `retryAfter(lease)`.
/// 3. Send; then `email_sent_at = now()`.
/// 4. An SMTP error releases the claim (`email_intent_at = NULL`) before rethrowing: our own session ended.
///
/// A crash between the server accepting the message and step 3 leaves a claim without `email_sent_at`;
/// once the lease expires the next run sends again with the same Message-ID. The system therefore errs on
/// the side of a duplicate (identical) mail, never on the side of a user who is not told.
struct ExportMailer: Sendable {
    let configuration: PrivacyConfiguration
    let smtp: SMTPSender

    enum Outcome: Equatable { case sent, alreadySent, noAddress }

    func deliver(exportID: UUID, context: JobContext) throws -> Outcome {
        let lease = configuration.mailLeaseSeconds
        let state = try context.withConnection { conn in
            try conn.queryFirst("""
                SELECT e.status, e.url, e.expires_at, e.completed_at, e.email_sent_at, e.email_intent_at,
                       u.email, u.anonymized_at
                FROM privacy_exports e JOIN users u ON u.id = e.user_id WHERE e.id = $1
                """, [exportID])
        }
        guard let state, try state.string("status") == "ready" else { return .alreadySent }
        if try state.optionalDate("email_sent_at") != nil { return .alreadySent }
        guard try state.optionalDate("anonymized_at") == nil else { return .alreadySent }
        guard let recipient = try state.optionalString("email"), !recipient.isEmpty else {
            _ = try context.withConnection { conn in
                try conn.execute("""
                    UPDATE privacy_exports SET error = 'no email address on file: link not mailed'
                    WHERE id = $1 AND email_sent_at IS NULL
                    """, [exportID])
            }
            context.logger.warning("export ready but the user has no email address: link not mailed")
            return .noAddress
        }
        let mail = ExportMail(exportID: exportID, url: try state.string("url"), expiresAt: try state.date("expires_at"),
                              completedAt: try state.date("completed_at"))
        let message = mail.message(to: recipient, configuration: configuration)
        let hadIntent = try state.optionalDate("email_intent_at") != nil

        let claimed = try context.withConnection { conn in
            try conn.execute("""
                UPDATE privacy_exports SET email_intent_at = now(), email_message_id = $2
                WHERE id = $1 AND status = 'ready' AND email_sent_at IS NULL
                  AND (email_intent_at IS NULL OR email_intent_at < now() - make_interval(secs => $3))
                """, [exportID, message.normalizedMessageID, lease])
        }
        if claimed == 0 {
            let sent = try context.withConnection { conn in
                try conn.queryFirst("SELECT email_sent_at FROM privacy_exports WHERE id = $1", [exportID])?
                    .optionalDate("email_sent_at")
            }
            if sent != nil { return .alreadySent }
            throw JobError.retryAfter(.seconds(lease),
                                      reason: "another run holds the export mail claim (sending, or crashed while sending)")
        }
        if hadIntent {
            context.logger.warning("resending export mail after an unconfirmed attempt (same Message-ID)",
                                   metadata: ["message_id": "\(message.normalizedMessageID)"])
        }
        do throws(SMTPError) {
            try smtp.send(message)
        } catch {
            _ = try? context.withConnection { conn in
                try conn.execute("""
                    UPDATE privacy_exports SET email_intent_at = NULL, error = $2
                    WHERE id = $1 AND email_sent_at IS NULL
                    """, [exportID, "mail: " + Self.describe(error)])
            }
            if error.isRetryable { throw ExportMailError(reason: Self.describe(error)) }
            throw JobError.permanent("export mail refused: \(Self.describe(error))")
        }
        _ = try context.withConnection { conn in
            try conn.execute("UPDATE privacy_exports SET email_sent_at = now(), error = NULL WHERE id = $1", [exportID])
        }
        context.logger.info("export mail sent", metadata: ["message_id": "\(message.normalizedMessageID)"])
        return .sent
    }

    /// The error without the recipient's address (`invalidMessage` texts may quote it).
    static func describe(_ error: SMTPError) -> String {
        if case .invalidMessage = error { return "SMTP invalid message (address or header rejected locally)" }
        return error.description
    }
}

/// A retryable mail failure (timeout, connection, 4xx): the job is retried with backoff.
struct ExportMailError: Error, CustomStringConvertible {
    let reason: String
    var description: String { "export mail not delivered yet: \(reason)" }
}
