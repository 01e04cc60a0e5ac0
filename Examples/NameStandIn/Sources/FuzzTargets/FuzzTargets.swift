/// A stand-in module named `FuzzTargets`, as another package of an adopter might declare.
public enum FuzzTargetsStandIn { public static let name = "FuzzTargets" }
