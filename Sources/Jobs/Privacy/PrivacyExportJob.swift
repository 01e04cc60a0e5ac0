import Foundation
import Logging
import WorkersMail
import WorkersQueue
import WorkersStorage
import Workers

/// GDPR Art. 15/20 export: `PrivacyExportJob` with args `[{"user_id": UUID, "export_id": UUID}]`.
///
/// Steps: (1) load the `privacy_exports` row and check it belongs to `user_id`; (2) unless it is already
/// `ready`, stream the document to `<dir>/<export_id>.json` (atomic, 0600) and, in one ledger transaction,
/// mark the row `ready` with size, signed URL (7 days) and expiry — unless the user was anonymised meanwhile,
/// in which case the file is removed; (3) send the mail once (`ExportMailer`).
///
/// Idempotent: a row already `ready` is not regenerated (same file, URL and expiry); the mail is sent once
/// per export (see `ExportMailer` for the crash window). Not using the runtime's ledger skip on purpose: a
/// redelivery after the commit must still reach the mail step.
public struct PrivacyExportJob: Job {
    public static let options = JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(900), usesLedger: false)

    /// `[{"user_id": UUID, "export_id": UUID}]` (a value that is not a UUID: `JobError.badInput`, dead at once).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "PrivacyExportJob"
        public let userID: UUID
        public let exportID: UUID
        public init(userID: UUID, exportID: UUID) {
            self.userID = userID
            self.exportID = exportID
        }
        enum CodingKeys: String, CodingKey { case user_id, export_id }
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            // Both keys first (a missing key is "do not fit"), then the UUID checks.
            let (userIDText, exportIDText) = (try c.decode(String.self, forKey: .user_id), try c.decode(String.self, forKey: .export_id))
            userID = try ArgumentUUID.parse(userIDText, field: "user_id")
            exportID = try ArgumentUUID.parse(exportIDText, field: "export_id")
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeUUID(userID, forKey: .user_id)
            try c.encodeUUID(exportID, forKey: .export_id)
        }
    }

    let configuration: PrivacyConfiguration
    let store: ExportFileStore
    let signer: ExportURLSigner
    let mailer: ExportMailer
    let now: @Sendable () -> Date

    public init(configuration: PrivacyConfiguration, smtp: SMTPSender, now: @escaping @Sendable () -> Date = { Date() }) {
        self.configuration = configuration
        self.store = ExportFileStore(directory: configuration.storageDirectory)
        self.signer = ExportURLSigner(configuration: configuration)
        self.mailer = ExportMailer(configuration: configuration, smtp: smtp)
        self.now = now
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let userID = arguments.userID
        let exportID = arguments.exportID

        let row = try context.withConnection { conn in
            try conn.queryFirst("""
                SELECT e.user_id, e.status, u.anonymized_at
                FROM privacy_exports e JOIN users u ON u.id = e.user_id WHERE e.id = $1
                """, [exportID])
        }
        guard let row else { throw JobError.badInput("export \(exportID.uuidString.lowercased()) does not exist") }
        guard try row.uuid("user_id") == userID else {
            throw JobError.badInput("export \(exportID.uuidString.lowercased()) belongs to another user")
        }
        if try row.optionalDate("anonymized_at") != nil {
            context.logger.info("user was anonymised: export skipped")
            return
        }
        let status = try row.string("status")
        if status == "expired" {
            context.logger.info("export already expired: nothing to do")
            return
        }
        if status != "ready" {
            try generate(userID: userID, exportID: exportID, context: context)
        }
        _ = try mailer.deliver(exportID: exportID, context: context)
    }

    private func generate(userID: UUID, exportID: UUID, context: JobContext) throws {
        try context.withConnection { conn in
            _ = try conn.execute("""
                UPDATE privacy_exports SET status = 'processing' WHERE id = $1 AND status IN ('pending', 'failed')
                """, [exportID])
        }
        let generatedAt = now()
        let file = try context.withConnection { conn in
            try store.write(exportID: exportID) { sink in
                try ExportDocumentWriter().write(userID: userID, exportID: exportID, generatedAt: generatedAt,
                                                 connection: conn, into: sink, isCancelled: { context.isCancelled })
            }
        }
        let expires = Date(timeIntervalSince1970: (generatedAt.timeIntervalSince1970 + configuration.linkValidity).rounded(.down))
        let url = signer.sign(exportID: exportID, expires: expires)
        var anonymised = false
        try context.transaction { conn in
            // Serialises with the deletion job (which locks the user FOR UPDATE): either the deletion sees this
            // export row and deletes its file, or this sees the anonymisation and drops the file itself.
            let user = try conn.queryFirst("SELECT anonymized_at FROM users WHERE id = $1 FOR SHARE", [userID])
            let anonymizedAt = try user?.optionalDate("anonymized_at")
            if user == nil || anonymizedAt != nil {
                anonymised = true
                return
            }
            try conn.execute("""
                UPDATE privacy_exports
                SET status = 'ready', schema_version = $2, file_path = $3, size_bytes = $4, url = $5,
                    expires_at = $6, completed_at = $7, error = NULL
                WHERE id = $1 AND status IN ('pending', 'processing', 'failed')
                """, [exportID, ExportSchema.version, file.path, file.size, url, expires, generatedAt])
        }
        if anonymised {
            try store.remove(path: file.path)
            context.logger.info("user anonymised while exporting: file removed")
            return
        }
        context.logger.info("export written", metadata: ["bytes": "\(file.size)"])
    }
}
