import ArgumentParser
import FireAgentCore

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
        let status = AgentCommandLine.syncOnce(configPath: config ?? AgentConfig.defaultPath)
        if status != 0 { throw ExitCode(status) }
    }
}
