import ArgumentParser
import FireAgentCore
import TinyFire

/// `fire-agent sync --once`: one collection and delivery cycle, then exit (cron, tests).
struct SyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Collect telemetry once, take the spool, queue the batches and deliver the queue; then exit.")

    @Option(name: .customLong("config"), help: "The config file (default \(AgentConfig.defaultPath)).")
    var config: String?

    @Flag(name: .customLong("once"), help: "Run one cycle and exit (the only mode until the daemon runs it on a schedule).")
    var once = false

    func validate() throws {
        guard once else { throw ValidationError("sync needs --once (`fire-agent run` is the daemon)") }
    }

    func run() throws {
        let loaded = try loadConfig(config ?? AgentConfig.defaultPath)
        let logger = agentLogger(loaded.logging)
        let agent: TelemetryAgent
        do {
            agent = try TelemetryAgent(config: loaded, logger: logger, userAgent: HTTPHeader.defaultUserAgent.value)
        } catch {
            printError("fire-agent: \(error)")
            throw ExitCode(ExitStatus.writeError.rawValue)
        }
        defer { agent.close() }
        let report = agent.syncOnce()
        print(
            "collected \(report.collectedPoints) points, spooled \(report.spooledLines) lines (\(report.rejectedLines) rejected); "
                + "queued \(report.queuedBatches) batches; delivered \(report.delivered), discarded \(report.discarded), "
                + "remaining \(report.remaining)")
        if let failure = report.failure {
            printError("fire-agent: delivery stopped: \(failure)")
            throw ExitCode(ExitStatus.deferred.rawValue)
        }
    }
}
