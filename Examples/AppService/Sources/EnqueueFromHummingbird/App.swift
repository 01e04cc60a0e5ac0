import Foundation
import Hummingbird
import WorkersClient

/// What `POST /reports/{id}/render` answers: the jid of the job it enqueued.
struct Enqueued: ResponseEncodable {
    let jid: String
}

/// `POST /reports/{id}/render` enqueues `RenderReport` with the report id and answers
/// `202 {"jid": "…"}`; a worker (`workerctl worker`) runs the job. Bad input is a 400; Redis
/// unreachable is a 503 (the request may be retried: a job is run at least once anyway).
///
/// Environment: `REDIS_URL` (default `RedisEndpoint.defaultURL`), `PORT` (default 8080).
@main
struct EnqueueFromHummingbird {
    static func main() async throws {
        let environment = ProcessInfo.processInfo.environment
        // One client per process: its pool and threads are shared by every request.
        let client = try WorkersClient(url: environment["REDIS_URL"] ?? RedisEndpoint.defaultURL, maxConnections: 8)
        defer { client.shutdown() }

        let router = Router()
        router.post("/reports/:id/render") { _, context -> EditedResponse<Enqueued> in
            let reportID = try context.parameters.require("id", as: Int.self)
            let job = NewJob("RenderReport", args: [.int(Int64(reportID))], queue: "default", retry: .int(5))
            do {
                let jid = try await client.enqueue(job)
                return EditedResponse(status: .accepted, response: Enqueued(jid: jid))
            } catch let error as EnqueueError {
                throw HTTPError(.badRequest, message: error.description)
            } catch let error as RedisError where error.isConnectionFailure {
                throw HTTPError(.serviceUnavailable, message: "the job queue is unavailable")
            }
        }
        let port = environment["PORT"].flatMap(Int.init) ?? 8080
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)))
        try await app.runService()
    }
}
