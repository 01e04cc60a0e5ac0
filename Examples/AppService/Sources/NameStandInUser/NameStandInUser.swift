// Compiled, not run: every name SwiftWorkers used before its prefix, from another package (Examples/NameStandIn),
// in one module beside SwiftWorkers' products. If a name of ours clashed, this package would not resolve or build.
import BenchJobs
import Boundary
import CivilDate
import FuzzTargets
import HTTP
import Jobs
import Mail
import Outbox
import Queue
import Scheduler
import Storage
import SubjectKeys
import Telemetry
import TestSupport
import WebDashboard
import CModules
import Workers
import WorkersClient
import WorkersOutbox
import WorkersSubjectKeys

/// One value from each stand-in module and each product, so none is an unused import.
public let standInNames: [String] = [JobsStandIn.name, QueueStandIn.name, HTTPStandIn.name, StorageStandIn.name, MailStandIn.name, TelemetryStandIn.name, SchedulerStandIn.name, BoundaryStandIn.name, CivilDateStandIn.name, TestSupportStandIn.name, OutboxStandIn.name, SubjectKeysStandIn.name, BenchJobsStandIn.name, WebDashboardStandIn.name, FuzzTargetsStandIn.name] + [String(cStandIns)]
public let productTypes: [Any.Type] = [WorkerProcess.self, WorkersClient.self, Outbox.self, SubjectArgumentsSealer.self]
