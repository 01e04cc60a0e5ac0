/// A stand-in module named `Jobs`, as another package of an adopter might declare.
public enum JobsStandIn { public static let name = "Jobs" }
