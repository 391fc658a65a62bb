import ArgumentParser
import FireAgentCore

/// `fire-agent run`: the daemon (systemd's `ExecStart`).
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the agent as a service: collect and sync on a schedule until SIGTERM; SIGHUP reloads the config.")

    @Option(name: .customLong("config"), help: "The config file (default \(AgentConfig.defaultPath)).")
    var config: String?

    func run() throws {
        let status = AgentCommandLine.runDaemon(configPath: config ?? AgentConfig.defaultPath, options: .host)
        if status != 0 { throw ExitCode(status) }
    }
}

/// The agent's logger for a config's `logging` section: text or JSON lines on standard error,
/// journald-friendly under systemd.
@Sendable func agentLogger(_ logging: AgentConfig.Logging) -> Logger {
    let format = LogOutput.Format(rawValue: logging.format) ?? .text
    return Logger(label: "fire-agent", output: LogOutput(format: format, journal: AgentLogHandler.stderrIsJournal()), level: logging.level)
}

/// The checked config at `path`; every problem printed and exit 78 when it has any.
func loadConfig(_ path: String) throws -> AgentConfig {
    do {
        return try AgentConfig.load(path: path)
    } catch {
        printError("\(error)")
        throw ExitCode(ExitStatus.configError.rawValue)
    }
}
