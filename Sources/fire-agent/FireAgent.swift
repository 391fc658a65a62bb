import ArgumentParser
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
}
