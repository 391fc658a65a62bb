import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Why an update was refused: the kind (for counters and tests) and a message that names the
/// problem (for the log, the status and the report to the server).
package struct FirmwareRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of refusal.
    package enum Kind: String, Sendable, Equatable {
        /// The manifest is not a manifest (syntax, a missing or wrong field, too large).
        case badManifest
        /// No signature, or none valid by a configured key.
        case badSignature
        /// `expires` is past (checked again at every poll: the clock may have been wrong).
        case expired
        /// The manifest has an `expires`, and the wall clock cannot be trusted to check it
        /// (`ClockVerdict`): not a refusal of the release, a wait; checked again at every poll.
        case clockUntrusted
        /// This device's type is not in `compatible`.
        case incompatible
        /// Not newer than the highest version ever accepted (and downgrades are not allowed).
        case notNewer
        /// The downloaded image's size differs from the manifest's.
        case sizeMismatch
        /// The downloaded image's SHA-256 differs from the manifest's.
        case hashMismatch
        /// The staging directory failed the image, not the server: it cannot be read back or
        /// moved into place (a file system gone read-only, an I/O error). Not downloaded again.
        case stagingFailed
    }

    /// The kind.
    package let kind: Kind
    /// What is wrong, in words.
    package let message: String

    /// `kind: message`.
    package var description: String { "\(kind.rawValue): \(message)" }

    /// A refusal.
    /// - Parameters:
    ///   - kind: what kind.
    ///   - message: what is wrong, in words.
    package init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }
}

/// A firmware manifest: what the vendor signed. The signature covers its exact bytes, so every
/// field below is signed. Format (docs/FIRMWARE.md):
///
/// ```json
/// { "version": "2.1.0", "compatible": ["acme-gw-1"], "image": "gw-2.1.0.img",
///   "size": 73400320, "sha256": "9f86d0…", "expires": "2027-01-31T00:00:00Z", "notes": "…" }
/// ```
///
/// `image` is absolute or relative to the manifest's URL. Unknown fields are ignored (a newer
/// vendor tool may add some). The document is read as strict RFC 8259 JSON (`StrictJSON`): no
/// JSON5, a field given twice is refused even when one spelling is escaped, and `size` must be
/// written as a whole number — nothing two readers could read differently.
package struct FirmwareManifest: Sendable, Equatable {
    /// The largest manifest read; a longer document is refused.
    package static let maximumBytes = 64 * 1024
    /// The largest image a manifest may sign: 2^48 bytes (256 TiB), far above any board's
    /// storage and far below where the download's arithmetic (sizes, offsets, the staging
    /// reserve added) could overflow. A larger `size` is refused when the manifest is read.
    package static let maximumImageSize: Int64 = 1 << 48

    /// Why `size` cannot be a signed image's size, or nil: one rule for a manifest read from the
    /// network and for an update recorded in the state by an earlier agent.
    /// - Parameter size: bytes.
    /// - Returns: the problem, naming the field.
    package static func sizeProblem(_ size: Int64) -> String? {
        guard size >= 1 else { return "size \(size) is not a whole number of bytes above 0" }
        guard size <= maximumImageSize else {
            return "size \(size) is above \(maximumImageSize) bytes (2^48), the largest image accepted"
        }
        return nil
    }

    /// The version offered.
    package let version: SemanticVersion
    /// Device types it is built for.
    package let compatible: [String]
    /// Where the image is, resolved against the manifest's URL.
    package let image: AbsoluteURL
    /// `image` as text.
    package var imageURL: String { image.absoluteString }
    /// The image's length in bytes: 1 … `maximumImageSize`.
    package let size: Int64
    /// The image's SHA-256, 32 bytes.
    package let sha256: [UInt8]
    /// After this time the manifest is refused (no freezing a fleet on an old one).
    package let expires: WallTime?
    /// Release notes, shown in the log.
    package let notes: String?

    /// What a manifest read from a file (`fire-agent firmware verify`) resolves a relative
    /// `image` against: only the file is checked then, and its host shows the image is beside it.
    package static var fileBase: AbsoluteURL {
        guard let url = AbsoluteURL("https://manifest.invalid/") else { preconditionFailure("a constant URL parses") }
        return url
    }

    /// Reads a manifest (only once its signature was verified over these exact bytes).
    /// - Parameters:
    ///   - bytes: the document.
    ///   - url: where it came from (relative `image` URLs resolve against it).
    /// - Throws: `FirmwareRefusal` `.badManifest` naming the field.
    package static func parse(_ bytes: [UInt8], from url: AbsoluteURL) throws(FirmwareRefusal) -> FirmwareManifest {
        func refuse(_ message: String) -> FirmwareRefusal { FirmwareRefusal(kind: .badManifest, message: message) }
        guard bytes.count <= maximumBytes else { throw refuse("\(bytes.count) bytes, more than \(maximumBytes)") }
        let root: StrictJSON
        do {
            root = try StrictJSON.parse(bytes)
        } catch {
            throw refuse("not JSON (RFC 8259): \(error)")
        }
        guard case .object(let fields) = root else { throw refuse("the document must be a JSON object") }
        func string(_ key: String) throws(FirmwareRefusal) -> String {
            guard let value = fields[key] else { throw refuse("\(key) is missing") }
            guard case .string(let text) = value, !text.isEmpty else { throw refuse("\(key) must be a non-empty string") }
            return text
        }
        let versionText = try string("version")
        guard let version = SemanticVersion(versionText) else { throw refuse("version \"\(versionText)\" is not a version (1.2.3)") }
        guard case .array(let list)? = fields["compatible"], !list.isEmpty else {
            throw refuse("compatible must be a non-empty array of device types")
        }
        var compatible: [String] = []
        for item in list {
            guard case .string(let type) = item, !type.isEmpty else { throw refuse("compatible must hold non-empty strings") }
            compatible.append(type)
        }
        let imageText = try string("image")
        guard let image = url.resolving(imageText), case let scheme = image.scheme.lowercased(), scheme == "http" || scheme == "https",
            let host = image.host, !host.isEmpty
        else { throw refuse("image \"\(imageText)\" is not an http(s) URL, absolute or relative to \(url.absoluteString)") }
        let size: Int64
        switch fields["size"] {
        case .integer(let value)?:
            if let problem = Self.sizeProblem(value) { throw refuse(problem) }
            size = value
        case .number(let value)?:
            throw refuse("size \(value) is not a whole number of bytes above 0 (written without fraction or exponent)")
        default:
            throw refuse("size must be a number of bytes")
        }
        let hashText = try string("sha256").lowercased()
        guard let sha256 = Self.hexBytes(hashText), sha256.count == 32 else { throw refuse("sha256 must be 64 hexadecimal digits") }
        var expires: WallTime?
        if let value = fields["expires"] {
            guard case .string(let text) = value, let date = WallTime(rfc3339: text) else {
                throw refuse("expires must be an RFC 3339 time (2027-01-31T00:00:00Z)")
            }
            expires = date
        }
        var notes: String?
        if let value = fields["notes"] {
            guard case .string(let text) = value else { throw refuse("notes must be a string") }
            notes = text
        }
        return FirmwareManifest(
            version: version, compatible: compatible, image: image, size: size, sha256: sha256, expires: expires, notes: notes)
    }

    /// `sha256` in lowercase hexadecimal.
    package var sha256Hex: String { hex(sha256) }

    /// Checks a file against the manifest's size and SHA-256, reading it once through a fixed
    /// buffer.
    /// - Parameter path: the image.
    /// - Throws: `FirmwareRefusal` `.sizeMismatch` or `.hashMismatch`; `.stagingFailed` when the
    ///   file cannot be read (that says nothing about the image).
    package func verifyImage(at path: String) throws(FirmwareRefusal) {
        let hasher = SHA256Hasher()
        guard let bytes = hasher.update(fromFile: path) else {
            throw FirmwareRefusal(kind: .stagingFailed, message: "\(path) cannot be read: \(errnoMessage(errno))")
        }
        guard bytes == UInt64(size) else {
            throw FirmwareRefusal(kind: .sizeMismatch, message: "\(path) is \(bytes) bytes, the manifest signed \(size)")
        }
        guard hasher.finish() == sha256 else {
            throw FirmwareRefusal(kind: .hashMismatch, message: "the SHA-256 of \(path) differs from the manifest's")
        }
    }

    /// Bytes from lowercase hexadecimal, or nil.
    package static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 0x30...0x39: return byte - 0x30
            case 0x61...0x66: return byte - 0x61 + 10
            default: return nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }
}

/// Whether a verified manifest may be installed on this device: sans-I/O, fed the facts.
package enum UpdateDecision {
    /// The manifest's verdict.
    /// - Parameters:
    ///   - manifest: the verified manifest.
    ///   - deviceType: this device's type (config).
    ///   - highestAccepted: the highest version this device ever accepted (persistent state;
    ///     the running version at first), nil when none is known.
    ///   - allowDowngrade: the config's explicit permission to install older versions.
    ///   - now: the time.
    ///   - clock: whether `now` can be trusted; an expiry is checked only against a trusted clock.
    /// - Throws: `FirmwareRefusal` (`.clockUntrusted`, `.expired`, `.incompatible`, `.notNewer`).
    package static func check(
        _ manifest: FirmwareManifest, deviceType: String, highestAccepted: SemanticVersion?, allowDowngrade: Bool, now: WallTime,
        clock: ClockVerdict = .trusted
    ) throws(FirmwareRefusal) {
        if manifest.expires != nil, !clock.isTrusted {
            throw FirmwareRefusal(
                kind: .clockUntrusted, message: "the expiry of the manifest for \(manifest.version) cannot be checked: \(clock.reason)")
        }
        if let expires = manifest.expires, expires <= now {
            throw FirmwareRefusal(
                kind: .expired, message: "the manifest for \(manifest.version) expired at \(expires)")
        }
        guard manifest.compatible.contains(deviceType) else {
            throw FirmwareRefusal(
                kind: .incompatible,
                message: "\(manifest.version) is for \(manifest.compatible.joined(separator: ", ")), not for this device (\(deviceType))")
        }
        if let highestAccepted, manifest.version <= highestAccepted, !allowDowngrade {
            throw FirmwareRefusal(
                kind: .notNewer,
                message: "\(manifest.version) is not newer than \(highestAccepted), the highest version accepted on this device "
                    + "(firmware.allowDowngrade permits older ones)")
        }
    }
}
