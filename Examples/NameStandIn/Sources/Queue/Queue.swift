/// A stand-in module named `Queue`, as another package of an adopter might declare.
public enum QueueStandIn { public static let name = "Queue" }
