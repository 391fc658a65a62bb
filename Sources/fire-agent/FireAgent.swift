import ArgumentParser
import TinyFire

/// fire-agent: TinyFire's device agent and on-board HTTP debugging tool.
@main
struct FireAgent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fire-agent",
        abstract: "TinyFire device agent: telemetry, offline queue, firmware updates, and a curl-like client.",
        version: "fire-agent \(HTTPHeaders.tinyFireVersion) (TinyFire \(HTTPHeaders.tinyFireVersion))",
        subcommands: [RequestCommand.self]
    )
}
