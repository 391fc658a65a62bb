import ArgumentParser
import FireAgentCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `fire-agent config check|show`: the config file, checked or shown with its defaults.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Check the config file, or show the effective config.",
        subcommands: [Check.self, Show.self]
    )

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a config file; prints every problem with its key path (exit 78 when there is one).")

        @Argument(help: "The file (default: --config, else \(AgentConfig.defaultPath)).")
        var file: String?

        @Option(name: .customLong("config"), help: "The config file.")
        var config: String?

        func run() throws {
            let status = AgentCommandLine.configCheck(path: file ?? config ?? AgentConfig.defaultPath)
            if status != 0 { throw ExitCode(status) }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the effective config, defaults filled in, secrets masked.")

        @Option(name: .customLong("config"), help: "The config file (default \(AgentConfig.defaultPath)).")
        var config: String?

        @Flag(name: .customLong("show-secrets"), help: "Print passwords and tokens instead of ********.")
        var showSecrets = false

        func run() throws {
            let status = AgentCommandLine.configShow(path: config ?? AgentConfig.defaultPath, showSecrets: showSecrets)
            if status != 0 { throw ExitCode(status) }
        }
    }
}
