import Crypto
import _CryptoExtras
import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// The producer of bench/receipts-cpu.sh (issue 38 goal 2: the CPU of a receipts job on its real code path; not what
/// it measures). Against the fakes the script started (`RECEIPTS_BENCH_FAKES`: their ready line) and the database in
/// `DATABASE_URL`, it sets up one store's purchases and pushes `RECEIPTS_BENCH_JOBS` (default 1,000)
/// `ValidateReceiptJob`s for them into `queue:default` of `REDIS_URL`, in pipelined batches of 500 through `JobClient`:
///
/// - `RECEIPTS_BENCH_FILL=apple`: App Store Server API mode. A fresh signing chain (`TestAppleSigner`) whose root it
///   writes to `<RECEIPTS_BENCH_DIR>/apple-root.der` (the worker's `RECEIPTS_APPLE_ROOT_CA_FILES`); the fake told to
///   check our API JWTs against the fixture key (`certs/testSigningKey.p8`, the worker's `.p8`). Per job one user and
///   one subscription registered with the fake (Get Transaction Info and Get All Subscription Statuses, signed), the
///   job carrying the device's signed transaction (`appAccountToken` = the user): four JWS verified per run.
/// - `RECEIPTS_BENCH_FILL=google`: a fresh RSA service account, written to
///   `<RECEIPTS_BENCH_DIR>/google-service-account.json` and told to the fake (which checks every token assertion);
///   per job one user and one active, unacknowledged purchase registered with the fake (package com.example.app).
///
/// Ids carry `RECEIPTS_BENCH_RUN` so every fill of a script run is new work. Skipped unless `RECEIPTS_BENCH_FILL` is
/// set.
final class ReceiptsBenchFillTests: XCTestCase {
    func testFill() throws {
        let env = ProcessInfo.processInfo.environment
        guard let store = env["RECEIPTS_BENCH_FILL"] else { throw XCTSkip("set RECEIPTS_BENCH_FILL=apple|google (bench/receipts-cpu.sh)") }
        XCTAssert(["apple", "google"].contains(store), "RECEIPTS_BENCH_FILL must be apple or google, got \(store)")
        let jobs = Int(env["RECEIPTS_BENCH_JOBS"] ?? "") ?? 1000
        let run = Int(env["RECEIPTS_BENCH_RUN"] ?? "") ?? 1
        let dir = URL(fileURLWithPath: try XCTUnwrap(env["RECEIPTS_BENCH_DIR"], "RECEIPTS_BENCH_DIR"))
        let ports = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(try XCTUnwrap(env["RECEIPTS_BENCH_FAKES"]).utf8))
                                  as? [String: Int], "RECEIPTS_BENCH_FAKES: the fakes' ready line")
        let fakes = FakeServers(attachingTo: ports)
        let pool = try PostgresPool(url: try XCTUnwrap(env["DATABASE_URL"], "DATABASE_URL"), maxConnections: 1)
        let client = JobClient(pool: try RedisPool(url: try XCTUnwrap(env["REDIS_URL"], "REDIS_URL"), maxConnections: 1))

        let appID = UUID()
        let (planID, users) = try pool.withConnection { c -> (UUID, [UUID]) in
            let plan = try c.queryFirst("""
                INSERT INTO subscription_plans (app_id, name, plan_type, apple_product_id, google_product_id, price)
                VALUES ($1, 'Premium', 'monthly', $2, $3, 4.99) RETURNING id
                """, [appID, ReceiptsDatabase.appleProduct, ReceiptsDatabase.googleProduct])!.uuid("id")
            let users = try c.query("INSERT INTO users (app_id) SELECT $1 FROM generate_series(1, $2) RETURNING id", [appID, jobs])
                .map { try $0.uuid("id") }
            return (plan, users)
        }
        XCTAssertEqual(users.count, jobs)

        let started = Date()
        var batch: [NewJob] = []
        func push(_ job: NewJob) throws {
            batch.append(job)
            if batch.count == 500 { try client.enqueueMany(batch); batch.removeAll() }
        }
        switch store {
        case "apple":
            let signer = try TestAppleSigner()
            try Data(signer.rootDER).write(to: dir.appendingPathComponent("apple-root.der"))
            try fakes.configure(.apple, ["api_jwt": ["issuer": "issuer-1", "key_id": "KEY123", "bundle_id": "com.example",
                                                     "public_key_pem": try P256KeyPEM.publicKeyPEM(fromPrivate: try AppleFixtures.signingKeyPEM())]])
            for (index, user) in users.enumerated() {
                let id = String(format: "%d%09d", run, index)
                let jws = try signer.subscriptionTransaction(id: id, original: id, accountToken: user)
                try signer.register(jws, id: id, with: fakes)
                try push(try NewJob(ValidateReceiptArguments(
                    userID: user, appID: appID, planID: planID,
                    proof: .apple(receiptData: nil, transactionID: id, originalTransactionID: nil, signedTransaction: jws))))
            }
        default:
            let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            let email = "bench@demo.iam.gserviceaccount.com"
            let account = jsonString(["type": "service_account", "project_id": "demo", "private_key_id": "k1",
                                      "private_key": key.pkcs8PEMRepresentation, "client_email": email,
                                      "token_uri": fakes.googleTokenURL])
            try Data(account.utf8).write(to: dir.appendingPathComponent("google-service-account.json"))
            try fakes.configure(.google, ["service_account": ["client_email": email, "public_key_pem": key.publicKey.pemRepresentation]])
            let expiry = ISO8601DateFormatter().string(from: Date().addingTimeInterval(29 * 86400))
            for (index, user) in users.enumerated() {
                let token = "bench.\(run).\(index).\(UUID().uuidString.lowercased())"
                try fakes.admin(.google, "POST", "google/subscriptions", json: [
                    "token": token, "subscriptionState": "SUBSCRIPTION_STATE_ACTIVE",
                    "productId": ReceiptsDatabase.googleProduct, "expiryTime": expiry])
                try push(try NewJob(ValidateReceiptArguments(
                    userID: user, appID: appID, planID: planID,
                    proof: .google(packageName: "com.example.app", productID: ReceiptsDatabase.googleProduct, purchaseToken: token))))
            }
        }
        if !batch.isEmpty { try client.enqueueMany(batch) }
        print("receipts-bench-fill: \(jobs) \(store) ValidateReceiptJob jobs in "
              + String(format: "%.1f", Date().timeIntervalSince(started)) + " s")
    }
}
