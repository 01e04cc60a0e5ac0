import WorkersClient

/// The job's contract, as a service's shared contract module would declare it.
struct InvoiceReminder: JobArguments {
    static let className = "Billing::InvoiceReminder"
    let invoiceID: Int
}

/// Enqueues one reminder on `REDIS_URL` (default `RedisEndpoint.defaultURL`) and prints its jid. Built (not run) by
/// scripts/check-producer-weight.
let url = CommandLine.arguments.dropFirst().first ?? RedisEndpoint.defaultURL
let client = try WorkersClient(url: url, maxConnections: 1)
defer { client.shutdown() }
print(try await client.enqueue(InvoiceReminder(invoiceID: 42)))
