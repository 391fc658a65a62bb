import ArgumentParser
import FireAgentCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fire-agent status`: what the running daemon last wrote to its status file.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the running daemon's status: last sync and delivery, queue, dead letters, reachability, config.",
        discussion:
            "Exit status: 0 when the daemon runs, 69 when it does not (its last status is still shown), 75 when it runs but "
            + "has not rewritten its status when due (what is shown is stale, and why), 78 for a bad config.")

    @Option(name: .customLong("config"), help: "The config file naming the status file (default \(AgentConfig.defaultPath)).")
    var config: String?

    @Option(name: .customLong("status-file"), help: "Read this status file instead of the config's daemon.statusFile.")
    var statusFile: String?

    @Flag(name: .customLong("json"), help: "Print the status document as JSON (for scripts).")
    var json = false

    func run() throws {
        let status = AgentCommandLine.status(configPath: config, statusFile: statusFile, json: json)
        if status != 0 { throw ExitCode(status) }
    }
}
