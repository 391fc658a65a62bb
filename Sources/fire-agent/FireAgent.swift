import ArgumentParser
import FireAgentCore
import TinyFire

/// fire-agent: TinyFire's device agent and on-board HTTP debugging tool.
///
/// The entry point is synchronous on purpose: Swift's async `main` hands the main thread to
/// `dispatch_main`, which ends it with `pthread_exit`; in a static executable that forced
/// unwind makes libgcc sort every frame descriptor of the binary (~150 M instructions, ~5 ms
/// of start-up, measured with callgrind). Commands wait on their requests instead.
@main
struct FireAgent: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fire-agent",
        abstract: "TinyFire device agent: telemetry, offline queue, firmware updates, and a curl-like client.",
        version: "fire-agent \(HTTPHeaders.tinyFireVersion) (TinyFire \(HTTPHeaders.tinyFireVersion))",
        subcommands: [
            RequestCommand.self, ReachabilityCommand.self, QueueCommand.self, ConfigCommand.self, SyncCommand.self, RunCommand.self,
            StatusCommand.self, FirmwareCommand.self,
        ]
    )

    /// Parses the arguments and runs the command. The Swift runtime learns the arguments from
    /// the C library at start-up; under some `LD_PRELOAD` libraries (libfaketime, which boards'
    /// test rigs use to move the clock) it learns none, so they are then read from
    /// `/proc/self/cmdline` rather than running as if none were given.
    static func main() {
        if CommandLine.arguments.isEmpty, let arguments = processArguments() {
            main(Array(arguments.dropFirst()))
        } else {
            main(nil)
        }
    }

    /// The process's arguments from `/proc/self/cmdline` (NUL-separated), at most 1 MiB.
    static func processArguments() -> [String]? {
        guard let text = SystemFiles().read("/proc/self/cmdline", limit: 1 << 20, whole: true), !text.isEmpty else { return nil }
        var arguments = text.split(separator: "\u{0}", omittingEmptySubsequences: false).map(String.init)
        if text.last == "\u{0}" { arguments.removeLast() }
        return arguments
    }
}
