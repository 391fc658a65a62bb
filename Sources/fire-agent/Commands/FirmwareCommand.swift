import ArgumentParser
import FireAgentCore

// FoundationEssentials only: the full Foundation would link ICU's data into the static binary.
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The exit statuses of `firmware update --once` (docs/CLI.md).
enum FirmwareExit {
    /// Another fire-agent holds the firmware flow's lock.
    static let busy: Int32 = 16

    static func code(_ outcome: FirmwareUpdater.CycleOutcome) -> Int32 {
        switch outcome {
        case .upToDate: 0
        case .installed: 10
        case .committed: 11
        case .refused: 12
        case .failed: 13
        case .rolledBack: 14
        case .deferred: ExitStatus.deferred.rawValue
        }
    }
}

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
            let path = config ?? AgentConfig.defaultPath
            let loaded = try loadConfig(path)
            guard let firmware = loaded.firmware else {
                printError("fire-agent: \(path) has no firmware section: nothing to update")
                throw ExitCode(ExitStatus.configError.rawValue)
            }
            let logger = agentLogger(loaded.logging)
            let updater: FirmwareUpdater
            do {
                updater = try FirmwareUpdater(
                    config: firmware, agentConfig: loaded, logger: logger, reachability: nil,
                    environment: ProcessInfo.processInfo.environment
                ) {}
            } catch {
                printError("fire-agent: \(error)")
                throw ExitCode(error.isBusy ? FirmwareExit.busy : ExitStatus.writeError.rawValue)
            }
            let outcome = updater.runOnce()
            switch outcome {
            case .upToDate(let text):
                print("up to date: \(text)")
            case .installed(let text), .committed(let text):
                print(text)
            case .refused(let text), .failed(let text), .rolledBack(let text), .deferred(let text):
                printError("fire-agent: \(text)")
            }
            let code = FirmwareExit.code(outcome)
            if code != 0 { throw ExitCode(code) }
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
            guard !keys.isEmpty else { throw ValidationError("--key is required (the vendor's public key)") }
            let loaded: [ManifestKey]
            do {
                loaded = try keys.map { path throws(ManifestKeyError) in try ManifestKey(contentsOf: path) }
            } catch {
                printError("fire-agent: \(error)")
                throw ExitCode(ExitStatus.readError.rawValue)
            }
            let files = SystemFiles()
            let signaturePath = signature ?? manifest + ".sig"
            guard let bytes = files.readBytes(manifest, limit: FirmwareManifest.maximumBytes + 1, whole: true, regularOnly: false) else {
                printError("fire-agent: \(manifest) cannot be read")
                throw ExitCode(ExitStatus.readError.rawValue)
            }
            guard let signed = files.readBytes(signaturePath, limit: ManifestSignature.maximumBytes + 1, whole: true, regularOnly: false)
            else {
                printError("fire-agent: \(signaturePath) cannot be read")
                throw ExitCode(ExitStatus.readError.rawValue)
            }
            do throws(FirmwareRefusal) {
                let key = try ManifestSignature.verify(signed, of: bytes, keys: loaded)
                print("signature: valid, by \(key)")
                // Relative image URLs resolve against a placeholder: only the file is checked here.
                let parsed = try FirmwareManifest.parse(bytes, from: URL(string: "https://manifest.invalid/")!)
                let location =
                    parsed.image.host() == "manifest.invalid"
                    ? "\(parsed.image.path(percentEncoded: false).dropFirst()) (beside the manifest)" : parsed.image.absoluteString
                print("manifest:  version \(parsed.version) for \(parsed.compatible.joined(separator: ", ")); image \(location)")
                print("           \(parsed.size) bytes, sha256 \(parsed.sha256Hex)")
                if let expires = parsed.expires { print("           expires \(AgentLogHandler.timestamp(expires))") }
                if let deviceType {
                    try UpdateDecision.check(parsed, deviceType: deviceType, highestAccepted: nil, allowDowngrade: true, now: Date())
                    print("device:    \(deviceType): compatible, not expired")
                }
                if let image {
                    let started = ContinuousClock.now
                    try parsed.verifyImage(at: image)
                    let took = ContinuousClock.now - started
                    let milliseconds = took.components.seconds * 1000 + took.components.attoseconds / 1_000_000_000_000_000
                    print("image:     \(image): size and SHA-256 match (hashed in \(milliseconds) ms)")
                }
            } catch {
                printError("fire-agent: refused: \(error)")
                throw ExitCode(65)
            }
        }
    }
}
