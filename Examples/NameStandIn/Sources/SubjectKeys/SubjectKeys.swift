/// A stand-in module named `SubjectKeys`, as another package of an adopter might declare.
public enum SubjectKeysStandIn { public static let name = "SubjectKeys" }
