import Foundation
import Logging
import ServiceLifecycle
import WorkersClient

/// The demo run of `AppWorker` (`APPWORKER_DEMO=N`): enqueues N welcome mails and N avatar resizes (typed: the same
/// `JobArguments` types the jobs decode), waits until the
/// worker has left all 2N effects in Redis, prints one line, then sends the process SIGTERM, so the stop goes through
/// the `ServiceGroup`'s graceful shutdown like a deployment's would. Effects missing after 60 s: throws (the group
/// stops, the executable exits non-zero).
///
/// Thread rules: a `Service`, run once by the group.
struct Demo: Service {
    let client: WorkersClient
    let count: Int
    let holdKey: String?
    let identity: String
    let logger: Logger

    struct EffectsMissing: Error, CustomStringConvertible {
        let mails: Int, avatars: Int, expected: Int
        var description: String { "after 60 s: \(mails) mails and \(avatars) avatars of \(expected) each" }
    }

    func run() async throws {
        _ = try await client.withConnection { try $0.command("DEL", Effects.mailsKey, Effects.avatarsKey) }
        let started = ContinuousClock.now
        for userID in 1...count {
            try await client.enqueue(WelcomeMail(userID: userID, locale: "en"))
            try await client.enqueue(AvatarResize(userID: userID, size: 64))
        }
        var done = (mails: 0, avatars: 0)
        while ContinuousClock.now - started < .seconds(60) {
            done = try await client.withConnection { connection in
                (Int(try connection.command("HLEN", Effects.mailsKey).integer ?? 0),
                 Int(try connection.command("HLEN", Effects.avatarsKey).integer ?? 0))
            }
            if done.mails == count && done.avatars == count { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        guard done.mails == count && done.avatars == count else {
            throw EffectsMissing(mails: done.mails, avatars: done.avatars, expected: count)
        }
        let line = "demo: \(count) welcome mails and \(count) avatars done by \(identity) in \(ContinuousClock.now - started)\n"
        FileHandle.standardOutput.write(Data(line.utf8))  // unbuffered: a script waits for this line
        if let holdKey {
            let until = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < until,
                  try await client.withConnection({ try $0.command("EXISTS", holdKey).integer }) != 1 {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        kill(getpid(), SIGTERM)  // the group's graceful shutdown, as a deployment's stop would begin it
        try? await gracefulShutdown()
    }
}
