import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// A vendor's public key that may sign firmware manifests (`firmware.keys` in the config):
/// ECDSA on P-256, P-384 or P-521, or RSA of at least 2048 bits, read from a PEM or
/// DER public key or from a certificate. Several keys allow rotation: any one valid signature
/// suffices.
package final class ManifestKey: @unchecked Sendable, CustomStringConvertible {
    /// The smallest RSA modulus accepted.
    package static let minimumRSABits = 2048
    /// The largest key file read.
    package static let maximumFileBytes = 64 * 1024

    /// Where the key was read from (for messages).
    package let path: String
    /// `sha256//…` of the key's SubjectPublicKeyInfo: names the key in the log and the report.
    package let fingerprint: String
    /// "ECDSA" or "RSA".
    package let algorithm: String
    /// The key's size in bits.
    package let bits: Int
    private let key: PublicKey

    /// Reads the key at `path`.
    /// - Parameter path: a PEM or DER public key or certificate.
    /// - Throws: `ManifestKeyError` naming the file and what is wrong with it.
    package init(contentsOf path: String) throws(ManifestKeyError) {
        guard let bytes = SystemFiles().readBytes(path, limit: Self.maximumFileBytes, whole: true) else {
            var info = stat()
            let problem =
                stat(path, &info) != 0 ? errnoMessage(errno) : "unreadable or larger than \(Self.maximumFileBytes) bytes"
            throw ManifestKeyError(path: path, message: "cannot be read: \(problem)")
        }
        let key: PublicKey
        do {
            key = try PublicKey(bytes: bytes)
        } catch {
            throw ManifestKeyError(path: path, message: error.description)
        }
        guard key.algorithm == .ecdsa || key.algorithm == .rsa else {
            throw ManifestKeyError(path: path, message: "neither an ECDSA nor an RSA key")
        }
        guard key.algorithm != .ecdsa || key.nistCurve != nil else {
            throw ManifestKeyError(
                path: path, message: "an ECDSA key on a curve other than P-256, P-384 or P-521 (\(key.bits) bits): not accepted")
        }
        guard key.algorithm != .rsa || key.bits >= Self.minimumRSABits else {
            throw ManifestKeyError(path: path, message: "an RSA key of \(key.bits) bits; at least \(Self.minimumRSABits) are required")
        }
        self.key = key
        self.path = path
        self.bits = key.bits
        self.algorithm = key.algorithm.rawValue
        self.fingerprint = "sha256//" + Base64.encode(key.spkiSHA256)
    }

    /// `RSA 3072 bits sha256//… (path)`.
    package var description: String { "\(algorithm) \(bits) bits \(fingerprint) (\(path))" }

    /// Whether `signature` is this key's signature of the SHA-256 digest `digest`.
    /// - Parameters:
    ///   - signature: DER ECDSA, or RSA PKCS#1 v1.5 or PSS.
    ///   - digest: 32 bytes.
    /// - Returns: true when valid.
    package func verifies(_ signature: [UInt8], ofDigest digest: [UInt8]) -> Bool {
        key.verifies(signature, ofSHA256: digest)
    }
}

/// A key file that cannot be used: which file, and why.
package struct ManifestKeyError: Error, Sendable, CustomStringConvertible {
    /// The key file.
    package let path: String
    /// What is wrong with it.
    package let message: String
    /// `firmware key PATH: message`.
    package var description: String { "firmware key \(path): \(message)" }
}
