/// A stand-in module named `Boundary`, as another package of an adopter might declare.
public enum BoundaryStandIn { public static let name = "Boundary" }
