import Foundation

/// How an App Store purchase is tied to one of our users.
///
/// Our mapping: the app passes the signed-in user's `users.id` (a UUID) as StoreKit's `appAccountToken` when it
/// starts a purchase (`Product.PurchaseOption.appAccountToken(_:)`; StoreKit 1: `SKMutablePayment
/// .applicationUsername` set to the same UUID string). Apple then signs it into every transaction of that purchase
/// (`JWSTransactionDecodedPayload.appAccountToken`; verifyReceipt `app_account_token`). A token naming another
/// user is proof that the purchase is someone else's. Sources: developer.apple.com/documentation/appstoreserverapi/
/// appaccounttoken, .../storekit/skmutablepayment/applicationusername ("When this value is a UUID, the App Store
/// server stores it as an appAccountToken"), .../appstorereceipts/app_account_token.
enum AppAccountToken {
    /// nil when the purchase carries no token; true when the token is `userID` (compared as UUIDs, so case does
    /// not matter); false when it names anyone else or is not a UUID.
    static func matches(_ token: String?, userID: UUID) -> Bool? {
        guard let token, !token.isEmpty else { return nil }
        return UUID(uuidString: token) == userID
    }
}
