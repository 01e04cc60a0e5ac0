import Workers
import WorkersClient

// The service's own jobs. Each job's `Arguments` is a `JobArguments` type shared by the enqueuer and the job, so both
// sides agree by construction; they travel as Sidekiq's single hash (`args: [{"user_id": 7, …}]`), the shape a Ruby
// or SQL producer sends too. Their effects are written to Redis hashes of the service's own, idempotently
// (HSET: a job delivered twice writes the same field twice), because a job runs at least once.

/// `SendWelcomeMail`'s arguments, on queue `mail`.
struct WelcomeMail: JobArguments {
    static let className = "SendWelcomeMail"
    static let queue = "mail"
    var userID: Int
    var locale: String

    enum CodingKeys: String, CodingKey {
        case userID = "user_id"
        case locale
    }
}

/// `ResizeAvatar`'s arguments: the user whose avatar is scaled to `size`×`size` pixels. Checked when decoded: a
/// size that does not divide the 256-pixel source is bad input (dead at once), so the job never checks it again.
struct AvatarResize: JobArguments {
    static let className = "ResizeAvatar"
    var userID: Int
    var size: Int

    enum CodingKeys: String, CodingKey {
        case userID = "user_id"
        case size
    }

    init(userID: Int, size: Int) {
        self.userID = userID
        self.size = size
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        userID = try container.decode(Int.self, forKey: .userID)
        size = try container.decode(Int.self, forKey: .size)
        guard (1...ResizeAvatar.sourceSide).contains(size), ResizeAvatar.sourceSide % size == 0 else {
            throw DecodingError.dataCorruptedError(forKey: .size, in: container,
                                                   debugDescription: "size must divide \(ResizeAvatar.sourceSide), got \(size)")
        }
    }
}

/// Where the demo's jobs leave their effects: hashes keyed by user id, in the service's Redis.
///
/// Thread rules: any pool thread; the pool hands each connection to one thread at a time.
struct Effects: Sendable {
    static let mailsKey = "appworker:welcome_mails"
    static let avatarsKey = "appworker:avatars"

    let client: WorkersClient

    /// Jobs run on the worker's own threads, where blocking is allowed: they borrow the client's pool directly.
    func record(_ key: String, field: Int, value: String) throws {
        _ = try client.pool.withConnection { try $0.command("HSET", key, "\(field)", value) }
    }
}

/// Renders the welcome mail and hands it to the mail system (here: records the rendered subject).
struct SendWelcomeMail: Job {
    static let className = WelcomeMail.className
    static let options = JobOptions(maxRetries: 5, timeout: .seconds(30))
    let effects: Effects

    func perform(_ mail: WelcomeMail, context: JobContext) throws {
        let subject = switch mail.locale {
        case "de": "Willkommen!"
        case "fr": "Bienvenue !"
        default: "Welcome!"
        }
        try effects.record(Effects.mailsKey, field: mail.userID, value: subject)
        context.logger.info("welcome mail sent", metadata: ["user_id": "\(mail.userID)"])
    }
}

/// Scales the user's 256×256 avatar down to `size`×`size` (box filter) and records the result's size and checksum.
struct ResizeAvatar: Job {
    static let className = AvatarResize.className
    static let options = JobOptions(maxRetries: 3, timeout: .seconds(60))
    static let sourceSide = 256
    let effects: Effects

    func perform(_ request: AvatarResize, context: JobContext) throws {
        let scaled = Self.resize(Self.avatar(of: request.userID), side: Self.sourceSide, to: request.size)
        let checksum = scaled.reduce(UInt32(0)) { ($0 &* 31) &+ UInt32($1) }
        try effects.record(Effects.avatarsKey, field: request.userID, value: "\(request.size)x\(request.size) \(checksum)")
    }

    /// The stored avatar (a generated gradient here: the example has no image store).
    static func avatar(of userID: Int) -> [UInt8] {
        (0..<sourceSide * sourceSide).map { UInt8(truncatingIfNeeded: ($0 % sourceSide) &+ ($0 / sourceSide) &* userID) }
    }

    static func resize(_ pixels: [UInt8], side: Int, to target: Int) -> [UInt8] {
        let factor = side / target
        return (0..<target * target).map { index in
            let (row, column) = (index / target, index % target)
            var sum = 0
            for y in 0..<factor { for x in 0..<factor { sum += Int(pixels[(row * factor + y) * side + column * factor + x]) } }
            return UInt8(sum / (factor * factor))
        }
    }
}
