/// A stand-in module named `Scheduler`, as another package of an adopter might declare.
public enum SchedulerStandIn { public static let name = "Scheduler" }
