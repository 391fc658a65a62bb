import ArgumentParser
import FireAgentCore
import TinyFire

/// `fire-agent firmware verify`: what the agent checks before an install, run by hand (a vendor
/// before publishing, an operator looking at a staged image).
struct FirmwareCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "firmware",
        abstract: "Firmware manifests and images, checked as the agent checks them.",
        subcommands: [Verify.self, Update.self]
    )

    /// `fire-agent firmware update --once`: one firmware cycle, as the daemon runs it.
    struct Update: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run one firmware cycle — confirm, poll, download, verify, install — and exit with what it came to.",
            discussion: """
                Exit status: 0 nothing to do; 10 installed, the new version runs after the reboot; 11 committed; \
                12 the offer was refused; 13 the update failed; 14 rolled back; 16 another fire-agent runs the \
                firmware flow; 75 not finished now (server unreachable, a retry, space, the clock, a sync): \
                run again later; 78 config problems.
                """)

        @Option(name: .customLong("config"), help: "The config file (default \(AgentConfig.defaultPath)).")
        var config: String?

        @Flag(name: .customLong("once"), help: "Run one cycle and exit (the daemon, `fire-agent run`, runs them on its schedule).")
        var once = false

        func validate() throws {
            guard once else { throw ValidationError("firmware update needs --once (`fire-agent run` is the daemon)") }
        }

        func run() throws {
            let status = AgentCommandLine.firmwareUpdate(
                configPath: config ?? AgentConfig.defaultPath, userAgent: HTTPHeader.defaultUserAgent.value)
            if status != 0 { throw ExitCode(status) }
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Verify a manifest's signature against public keys, and optionally an image against the manifest "
                + "(exit 0: valid; 65: refused, with the reason).")

        @Argument(help: "The manifest (JSON, as signed).")
        var manifest: String

        @Option(name: .customLong("key"), help: "A public key (PEM or DER) or certificate; repeat for several.")
        var keys: [String] = []

        @Option(name: .customLong("signature"), help: "The detached signature (default: MANIFEST.sig).")
        var signature: String?

        @Option(name: .customLong("image"), help: "An image to check against the manifest's size and SHA-256.")
        var image: String?

        @Option(name: .customLong("device-type"), help: "Also check that the manifest is for this device type.")
        var deviceType: String?

        func run() throws {
            let status = AgentCommandLine.firmwareVerify(
                manifest: manifest, keys: keys, signature: signature, image: image, deviceType: deviceType)
            if status != 0 { throw ExitCode(status) }
        }
    }
}
