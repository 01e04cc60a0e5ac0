/// A stand-in module named `Outbox`, as another package of an adopter might declare.
public enum OutboxStandIn { public static let name = "Outbox" }
