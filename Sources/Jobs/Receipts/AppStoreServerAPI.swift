import Foundation
import WorkersHTTP
import WorkersQueue
import Workers

/// `GET /inApps/v1/subscriptions/{transactionId}` (Get All Subscription Statuses).
struct SubscriptionStatusesResponse: Decodable, Sendable {
    struct LastTransaction: Decodable, Sendable {
        let originalTransactionId: String?
        let status: Int?
        let signedTransactionInfo: String?
        let signedRenewalInfo: String?
    }
    struct Group: Decodable, Sendable {
        let subscriptionGroupIdentifier: String?
        let lastTransactions: [LastTransaction]?
    }
    let environment: String?
    let bundleId: String?
    let data: [Group]?
}

/// `POST /inApps/v1/notifications/history` (NotificationHistoryResponse; developer.apple.com/documentation/appstoreserverapi/notificationhistoryresponse).
struct NotificationHistoryResponse: Decodable, Sendable {
    struct Item: Decodable, Sendable {
        /// The notification's `signedPayload`, as it was (or would have been) posted to our endpoint.
        let signedPayload: String?
    }
    let notificationHistory: [Item]?
    let hasMore: Bool?
    let paginationToken: String?
}

/// The App Store Server API client (Get Transaction Info, Get All Subscription Statuses).
///
/// Every request carries a fresh ES256 JWT. A transaction unknown to production (404) is looked up in sandbox,
/// as Apple advises. A 401 is retried once at once with a new JWT (a token rejected as expired, e.g. clock skew),
/// then becomes `StoreUnavailable` (our credentials are refused; retried with backoff so the purchase is not lost).
/// Thread rules: a value; safe from any thread.
struct AppStoreServerAPIClient: Sendable {
    let http: StoreHTTP
    let productionURL: String
    let sandboxURL: String
    let credentials: AppStoreServerAPICredentials
    let bundleID: String

    enum Lookup<T: Sendable>: Sendable {
        case found(T, environment: String)
        case notFound(String)
    }

    private struct SignedTransaction: Decodable { let signedTransactionInfo: String }

    /// The signed transaction `transactionID`, from production or else sandbox.
    func transactionInfo(_ transactionID: String, cancellation: HTTPCancellation?) throws -> Lookup<String> {
        switch try get("/inApps/v1/transactions/", transactionID, environments: ["Production", "Sandbox"],
                       cancellation: cancellation) {
        case .found(let response, let environment):
            let body = try StoreHTTP.decode(SignedTransaction.self, response, service: "App Store Server API")
            return .found(body.signedTransactionInfo, environment: environment)
        case .notFound(let why):
            return .notFound(why)
        }
    }

    /// The statuses of every subscription of the customer owning `transactionID`, in `environment`.
    func subscriptionStatuses(_ transactionID: String, environment: String,
                              cancellation: HTTPCancellation?) throws -> Lookup<SubscriptionStatusesResponse> {
        switch try get("/inApps/v1/subscriptions/", transactionID, environments: [environment], cancellation: cancellation) {
        case .found(let response, let env):
            return .found(try StoreHTTP.decode(SubscriptionStatusesResponse.self, response, service: "App Store Server API"),
                          environment: env)
        case .notFound(let why):
            return .notFound(why)
        }
    }

    /// The status and latest signed transaction / renewal info of the subscription `originalTransactionID` (its
    /// entry in Get All Subscription Statuses' `data[].lastTransactions`), or nil when Apple does not know it in
    /// `environment`. The signed parts are not verified here: callers verify them.
    func lastTransaction(of originalTransactionID: String, environment: String,
                         cancellation: HTTPCancellation?) throws -> (SubscriptionStatusesResponse.LastTransaction, environment: String)? {
        guard case .found(let statuses, let env) = try subscriptionStatuses(originalTransactionID, environment: environment,
                                                                           cancellation: cancellation),
              let last = statuses.data?.flatMap({ $0.lastTransactions ?? [] })
                .first(where: { $0.originalTransactionId == originalTransactionID }) else { return nil }
        return (last, env)
    }

    /// One page of Get Notification History (`POST /inApps/v1/notifications/history[?paginationToken=…]`, body
    /// `{"startDate", "endDate"}` in epoch milliseconds; developer.apple.com/documentation/appstoreserverapi/get-notification-history):
    /// at most 20 records a page, `hasMore` and `paginationToken` for the next one (NotificationHistoryResponse). A 401
    /// is retried once with a new JWT, then `StoreUnavailable`; 429 / 5xx as every request (`StoreHTTP`); another
    /// status is `StoreUnavailable` too (the reconciliation tries again on its next run).
    func notificationHistory(environment: String, startDate: Date, endDate: Date, paginationToken: String?,
                             cancellation: HTTPCancellation?) throws -> NotificationHistoryResponse {
        let base = environment == "Production" ? productionURL : sandboxURL
        let service = "App Store Server API (\(environment)) notification history"
        var url = base + "/inApps/v1/notifications/history"
        if let paginationToken { url = FormEncoding.appendingQuery([("paginationToken", paginationToken)], to: url) }
        let body = Data(#"{"startDate":\#(Bounded.int(startDate.timeIntervalSince1970 * 1000, in: 0...253_402_300_799_999)),"endDate":\#(Bounded.int(endDate.timeIntervalSince1970 * 1000, in: 0...253_402_300_799_999))}"#.utf8)
        func send() throws -> HTTPResponse {
            let jwt: String
            do { jwt = try AppStoreJWT.make(credentials: credentials, bundleID: bundleID) } catch {
                throw JobError.permanent("cannot sign the App Store Server API JWT: \(error)")
            }
            let request = HTTPRequest(method: .post, url: url, headers: ["Authorization": "Bearer " + jwt, "Accept": "application/json",
                                                                     "Content-Type": "application/json"], body: body)
            return try http.send(request, service: service, cancellation: cancellation)
        }
        var response = try send()
        if response.status == 401 { response = try send() }
        if response.status == 401 {
            throw StoreUnavailable(service, "HTTP 401: our JWT is refused; check issuer id, key id, key and bundle id")
        }
        try StoreHTTP.throwIfRetryable(response, service: service)
        guard response.isSuccess else {
            let error = try? response.jsonObject()
            let code = (error?["errorCode"] as? NSNumber).map { " (\($0.intValue))" } ?? ""
            throw StoreUnavailable(service, "HTTP \(response.status)\(code)")
        }
        return try StoreHTTP.decode(NotificationHistoryResponse.self, response, service: service)
    }

    /// GET `path` + `transactionID`. The id is a secret segment of the URL (`HTTPRequest.secretPathSegments`): the
    /// errors and logs of the request (a timeout, a dropped connection) show `…` in its place, not a personal value.
    private func get(_ path: String, _ transactionID: String, environments: [String],
                     cancellation: HTTPCancellation?) throws -> Lookup<HTTPResponse> {
        var lastNotFound = "not found"
        for environment in environments {
            let base = environment == "Production" ? productionURL : sandboxURL
            let service = "App Store Server API (\(environment))"
            var response = try send(base + path, transactionID, service: service, cancellation: cancellation)
            if response.status == 401 {
                response = try send(base + path, transactionID, service: service, cancellation: cancellation)
                if response.status == 401 {
                    throw StoreUnavailable(service, "HTTP 401: our JWT is refused; check issuer id, key id, key and bundle id")
                }
            }
            try StoreHTTP.throwIfRetryable(response, service: service)
            if response.isSuccess { return .found(response, environment: environment) }
            let error = try? response.jsonObject()
            let code = (error?["errorCode"] as? NSNumber)?.intValue
            let message = error?["errorMessage"] as? String ?? "HTTP \(response.status)"
            switch response.status {
            case 404:
                lastNotFound = "\(environment): \(message)" + (code.map { " (\($0))" } ?? "")
                continue
            case 400:
                throw JobError.badInput("\(service): \(message)" + (code.map { " (\($0))" } ?? ""))
            default:
                throw JobError.permanent("\(service) answered HTTP \(response.status): \(message)")
            }
        }
        return .notFound(lastNotFound)
    }

    private func send(_ url: String, _ transactionID: String, service: String, cancellation: HTTPCancellation?) throws -> HTTPResponse {
        let jwt: String
        do { jwt = try AppStoreJWT.make(credentials: credentials, bundleID: bundleID) } catch {
            throw JobError.permanent("cannot sign the App Store Server API JWT: \(error)")
        }
        var request = HTTPRequest.get(url + transactionID, headers: ["Authorization": "Bearer " + jwt, "Accept": "application/json"])
        request.secretPathSegments = [transactionID]
        return try http.send(request, service: service, cancellation: cancellation)
    }
}

/// The subscription's latest transaction, renewal info and status as Get All Subscription Statuses gives them
/// (`data[].lastTransactions` entry of its `originalTransactionId`), the signed parts verified.
struct AppleLatestStatus: Sendable {
    let transaction: AppleTransaction
    let renewal: AppleRenewalInfo?
    /// 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked (developer.apple.com/documentation/appstoreserverapi/status).
    let status: Int?

    /// Nil when Apple does not know the subscription in `environment` or names no transaction for it. Signed data that
    /// does not verify is `JobError.permanent` (dead with the reason), as a notification's own is.
    static func read(_ api: AppStoreServerAPIClient, verifier: AppleSignedDataVerifier, originalTransactionID: String,
                     environment: String, cancellation: CancellationFlag) throws -> AppleLatestStatus? {
        guard let (last, env) = try api.lastTransaction(of: originalTransactionID, environment: environment,
                                                        cancellation: HTTPCancellation(isCancelled: { cancellation.isCancelled })),
              let signed = last.signedTransactionInfo else { return nil }
        do {
            return AppleLatestStatus(transaction: try verifier.verifyTransaction(signed, expectedEnvironment: env),
                                     renewal: try last.signedRenewalInfo.map { try verifier.verifyRenewalInfo($0, expectedEnvironment: env) },
                                     status: last.status)
        } catch {
            throw JobError.permanent("Get All Subscription Statuses: signed data rejected: \(error)")
        }
    }
}
