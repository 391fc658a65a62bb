import ArgumentParser
import FireAgentCore

// FoundationEssentials only: the full Foundation would link ICU's data into the static binary.
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fire-agent firmware verify`: what the agent checks before an install, run by hand (a vendor
/// before publishing, an operator looking at a staged image).
struct FirmwareCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "firmware",
        abstract: "Firmware manifests and images, checked as the agent checks them.",
        subcommands: [Verify.self]
    )

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
            guard let bytes = files.readBytes(manifest, limit: FirmwareManifest.maximumBytes + 1, whole: true) else {
                printError("fire-agent: \(manifest) cannot be read")
                throw ExitCode(ExitStatus.readError.rawValue)
            }
            guard let signed = files.readBytes(signaturePath, limit: ManifestSignature.maximumBytes + 1, whole: true) else {
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
