import Foundation

/// The information GDPR Art. 15(1) gives the data subject beside the copy of the data, written into every
/// export document as `processing_information` (schema version 2): for each section of the export, the
/// purposes (a) and legal basis, the recipients (c), the retention (d) and the source (g); for the whole
/// document, the rights (e), (f), automated decision-making (h) and transfers to third countries (Art. 15(2)).
///
/// Invariant: `categories` has an entry for every `ExportSchema.sections` name (tested), so a section added
/// later cannot be exported without saying why it is processed. The texts describe what this system does
/// (docs/jobs-privacy.md, docs/jobs-geo-ads.md); periods that operators can change say "by default".
/// Immutable; safe from any thread.
public enum ProcessingInformation {
    /// What is said about one section of the export.
    public struct Category: Encodable, Sendable {
        public let purposes: [String]
        public let legal_basis: String
        public let recipients: [String]
        public let retention: String
        public let source: String
    }

    /// The whole-document part (Art. 15(1)(e), (f), (h), 15(2)).
    public struct Rights: Encodable, Sendable {
        public let rectification: String
        public let erasure: String
        public let restriction: String
        public let objection: String
        public let portability: String
        public let withdraw_consent: String
        public let complaint: String
    }

    static let you = "you, through the app"
    static let erasure = "until you delete your account; erased within one month of the deletion request (GDPR Art. 12(3), 17)"
    static let accounting = "detached from you on erasure and kept without your identity for accounting obligations"
    /// The app's ad network (seed 004: the app shows ads with the Google Mobile Ads SDK, `provider` = "admob").
    static let adNetwork = "the ad network that served the ad: Google AdMob (Google LLC, United States)"

    public static let categories: [String: Category] = [
        "profile": Category(purposes: ["providing your account and signing you in"], legal_basis: "contract (Art. 6(1)(b))",
                            recipients: ["e-mail delivery provider (your address, for messages you asked for)"],
                            retention: erasure, source: you + ", or the sign-in provider you chose (Google, Apple)"),
        "privacy_settings": Category(purposes: ["recording your consents and choices"],
                                     legal_basis: "legal obligation to demonstrate consent (Art. 6(1)(c), 7(1))",
                                     recipients: [], retention: erasure, source: you),
        "oauth_connections": Category(purposes: ["signing you in with an external account"],
                                      legal_basis: "contract (Art. 6(1)(b))", recipients: [], retention: erasure,
                                      source: "the sign-in provider you connected (Google, Apple)"),
        "game_center_connections": Category(purposes: ["linking your Game Center player"],
                                            legal_basis: "consent (Art. 6(1)(a))", recipients: [], retention: erasure,
                                            source: "Apple Game Center, when you linked it"),
        "sessions": Category(purposes: ["keeping you signed in on your devices", "security"],
                             legal_basis: "contract (Art. 6(1)(b))", recipients: [],
                             retention: "until the session expires or is revoked; erased with the account",
                             source: "your devices"),
        "subscriptions": Category(purposes: ["providing the paid features you bought", "accounting"],
                                  legal_basis: "contract (Art. 6(1)(b)) and legal obligation (Art. 6(1)(c))",
                                  recipients: ["Apple (App Store) or Google (Google Play), to verify the purchase"],
                                  retention: accounting, source: "the App Store or Google Play, and your app"),
        "subscription_events": Category(purposes: ["keeping your subscription state up to date", "accounting"],
                                        legal_basis: "contract (Art. 6(1)(b)) and legal obligation (Art. 6(1)(c))",
                                        recipients: [], retention: accounting,
                                        source: "notifications from the App Store or Google Play"),
        "receipts": Category(purposes: ["verifying your purchases", "accounting"],
                             legal_basis: "contract (Art. 6(1)(b)) and legal obligation (Art. 6(1)(c))",
                             recipients: ["Apple (App Store) or Google (Google Play), to verify the purchase"],
                             retention: accounting + " (the raw store receipt is erased)",
                             source: "your app and the store"),
        "credit_transactions": Category(purposes: ["keeping your credit balance"], legal_basis: "contract (Art. 6(1)(b))",
                                        recipients: ["our subscription service"], retention: accounting,
                                        source: "your use of the app (rewards, purchases)"),
        "pending_rewards": Category(purposes: ["crediting rewards you earned"], legal_basis: "contract (Art. 6(1)(b))",
                                    recipients: ["our subscription service"], retention: erasure,
                                    source: "your use of the app (ads watched, campaigns)"),
        "campaign_participations": Category(purposes: ["running the campaigns you joined"],
                                            legal_basis: "contract (Art. 6(1)(b))", recipients: [], retention: erasure,
                                            source: "your use of the app"),
        "quiz_history": Category(purposes: ["providing the game and your history"], legal_basis: "contract (Art. 6(1)(b))",
                                 recipients: [], retention: erasure, source: "your use of the app"),
        "achievements": Category(purposes: ["providing the game"], legal_basis: "contract (Art. 6(1)(b))",
                                 recipients: [], retention: erasure, source: "your use of the app"),
        "locations": Category(purposes: ["offering local quiz content near you"], legal_basis: "consent (Art. 6(1)(a))",
                              recipients: ["OpenStreetMap Foundation (Nominatim geocoding): the position rounded to "
                                           + "about 1 km, without your identity"],
                              retention: "by default 90 days, then rounded to about 11 km and detached from you; "
                                  + "erased when you withdraw consent or delete your account",
                              source: "your device (GPS, Wi-Fi, cell or IP location); the place names (city, "
                                  + "country) from OpenStreetMap data, © OpenStreetMap contributors, available under "
                                  + "the Open Database License (https://www.openstreetmap.org/copyright)"),
        "notifications": Category(purposes: ["sending you the notifications you chose"],
                                  legal_basis: "consent (Art. 6(1)(a))", recipients: [], retention: erasure,
                                  source: "our services"),
        "ad_requests": Category(purposes: ["showing ads", "ad revenue statistics"],
                                legal_basis: "consent for personalised ads (Art. 6(1)(a)), otherwise legitimate interest (Art. 6(1)(f))",
                                recipients: [adNetwork],
                                retention: "by default 2 years; detached from you on erasure",
                                source: "your use of the app"),
        "ad_views": Category(purposes: ["rewarding ads you watched", "ad revenue statistics"],
                             legal_basis: "contract (Art. 6(1)(b)) for rewards, legitimate interest (Art. 6(1)(f)) for statistics",
                             recipients: [adNetwork],
                             retention: "by default 2 years; detached from you on erasure",
                             source: "your use of the app"),
        "audit_log": Category(purposes: ["security of your account", "proof of what was done with your requests"],
                              legal_basis: "legitimate interest (Art. 6(1)(f)), legal claims (Art. 17(3)(e))",
                              recipients: [],
                              retention: "kept after erasure without network identifiers or details",
                              source: "our services, when you or we act on your account"),
        "privacy_exports": Category(purposes: ["answering your access requests (Art. 15, 20)"],
                                    legal_basis: "legal obligation (Art. 6(1)(c))",
                                    recipients: ["e-mail delivery provider (the download link)"],
                                    retention: "the file and its link expire after 7 days and are deleted",
                                    source: you),
        "deletion_requests": Category(purposes: ["carrying out your erasure request (Art. 17)"],
                                      legal_basis: "legal obligation (Art. 6(1)(c))", recipients: [],
                                      retention: "kept as proof of the erasure, without the reason you gave",
                                      source: you),
    ]

    public static let rights = Rights(
        rectification: "Art. 16: ask us to correct inaccurate data",
        erasure: "Art. 17: delete your account in the app; it is erased within one month of the request (2 days "
            + "before the month ends) unless you cancel",
        restriction: "Art. 18: ask us to restrict processing",
        objection: "Art. 21: object to processing based on legitimate interest",
        portability: "Art. 20: this document is machine-readable JSON",
        withdraw_consent: "Art. 7(3): change your privacy settings in the app at any time",
        complaint: "Art. 77: lodge a complaint with a data protection supervisory authority")

    /// Art. 15(2): every recipient outside the EEA named in `categories`, with its country and safeguard. The
    /// geocoding line describes the default provider, the OpenStreetMap Foundation's public Nominatim server
    /// (`GEO_NOMINATIM_URL`; an operator who points it at a server in the EEA must change it).
    public static let thirdCountryTransfers = "Apple (Apple Inc., United States) and Google (Google LLC, United States), "
        + "as app stores and sign-in providers, may process data outside the EEA under their own safeguards (Art. 46); "
        + "the ad network, Google AdMob (Google LLC, United States), receives what the ads in the app send it (device "
        + "advertising identifier, IP address, ad interactions) under the EU-U.S. Data Privacy Framework adequacy "
        + "decision (Art. 45) and Google's standard contractual clauses (Art. 46); the OpenStreetMap Foundation "
        + "(United Kingdom) receives positions rounded to about 1 km, without your identity, for geocoding (Nominatim), "
        + "under the adequacy decision for the United Kingdom (Art. 45)"

    /// `{"categories": {...}, "rights": {...}, "automated_decision_making": …, "third_country_transfers": …}`,
    /// keys sorted (the same bytes for every export of a schema version).
    public static func json() throws -> String {
        struct Document: Encodable {
            let categories: [String: Category]
            let rights: Rights
            let automated_decision_making: String
            let third_country_transfers: String
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let document = Document(
            categories: categories, rights: rights,
            automated_decision_making: "none: no decision producing legal or similarly significant effects is based "
                + "solely on automated processing (Art. 22)",
            third_country_transfers: thirdCountryTransfers)
        return String(decoding: try encoder.encode(document), as: UTF8.self)
    }
}
