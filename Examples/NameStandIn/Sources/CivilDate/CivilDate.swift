/// A stand-in module named `CivilDate`, as another package of an adopter might declare.
public enum CivilDateStandIn { public static let name = "CivilDate" }
