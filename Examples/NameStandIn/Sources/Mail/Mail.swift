/// A stand-in module named `Mail`, as another package of an adopter might declare.
public enum MailStandIn { public static let name = "Mail" }
