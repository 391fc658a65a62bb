import CTinyFireTLS

// mbedTLS's certificate, key and digest functions, behind the types of this file: with TLS.swift
// it is the only Swift code that calls the C module. Trust evaluation (Trust/) uses `X509`; the
// agent's manifest signatures use the public `SHA256` and `PublicKey`.

/// Incremental SHA-256 (mbedTLS's). Not thread-safe: one owner at a time.
///
/// Memory: about 110 bytes of mbedTLS state.
public final class SHA256: @unchecked Sendable {
    private let context: OpaquePointer
    /// Bytes hashed since the last reset.
    public private(set) var count: UInt64 = 0

    /// A fresh hasher.
    public init() {
        // A few hundred bytes: failure here is the process being out of memory.
        guard let context = tinyfire_sha256_new() else { preconditionFailure("tinyfire_sha256_new: out of memory") }
        self.context = context
    }

    deinit { tinyfire_sha256_free(context) }

    /// Starts over.
    public func reset() {
        _ = tinyfire_sha256_reset(context)
        count = 0
    }

    /// Adds bytes.
    /// - Parameter bytes: the next bytes.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = tinyfire_sha256_update(context, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        count += UInt64(bytes.count)
    }

    /// The digest of everything since the last reset; the hasher starts over afterwards.
    /// - Returns: 32 bytes.
    public func finish() -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = tinyfire_sha256_finish(context, &digest)
        reset()
        return digest
    }

    /// The digest of `bytes`.
    /// - Parameter bytes: the bytes.
    /// - Returns: 32 bytes.
    public static func digest(of bytes: [UInt8]) -> [UInt8] {
        let hasher = SHA256()
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finish()
    }
}

/// Why key material could not be used: mbedTLS's reason.
public struct CryptoError: Error, Sendable, CustomStringConvertible {
    /// mbedTLS's message and code.
    public let description: String
}

/// A public key read from PEM or DER (a SubjectPublicKeyInfo, an RSA public key, or the key of
/// a certificate), for verifying signatures over SHA-256 digests.
///
/// Memory: the parsed key (an RSA-4096 key is about 1 KiB).
public final class PublicKey: @unchecked Sendable {
    /// The key's algorithm.
    public enum Algorithm: String, Sendable {
        case ecdsa = "ECDSA"
        case rsa = "RSA"
        /// Another algorithm mbedTLS parsed (EdDSA is not supported by mbedTLS 2.28).
        case other = "other"
    }

    private let key: OpaquePointer
    /// The algorithm.
    public let algorithm: Algorithm
    /// The key's size in bits.
    public let bits: Int
    /// For ECDSA: 256, 384 or 521 for NIST P-256, P-384, P-521; nil for any other curve or
    /// algorithm.
    public let nistCurve: Int?
    /// SHA-256 of the key's SubjectPublicKeyInfo (what `sha256//` pins hold).
    public let spkiSHA256: [UInt8]

    /// Parses a key.
    /// - Parameter bytes: PEM (`BEGIN PUBLIC KEY`, `BEGIN RSA PUBLIC KEY`, `BEGIN CERTIFICATE`) or
    ///   DER.
    /// - Throws: `CryptoError` with mbedTLS's reason when the bytes are neither.
    public init(bytes: [UInt8]) throws(CryptoError) {
        var code: Int32 = 0
        guard let key = bytes.withUnsafeBufferPointer({ tinyfire_public_key_new($0.baseAddress, $0.count, &code) }) else {
            throw CryptoError(description: "not a public key or certificate: \(tlsErrorMessage(code))")
        }
        self.key = key
        switch tinyfire_public_key_kind(key) {
        case TINYFIRE_KEY_EC: algorithm = .ecdsa
        case TINYFIRE_KEY_RSA: algorithm = .rsa
        default: algorithm = .other
        }
        bits = Int(tinyfire_public_key_bits(key))
        let curve = tinyfire_public_key_nist_curve(key)
        nistCurve = curve > 0 ? Int(curve) : nil
        var digest = [UInt8](repeating: 0, count: 32)
        spkiSHA256 = tinyfire_public_key_spki_sha256(key, &digest) == 0 ? digest : []
    }

    deinit { tinyfire_public_key_free(key) }

    /// Whether `signature` is this key's signature of the SHA-256 digest `digest`.
    /// - Parameters:
    ///   - signature: DER ECDSA for an EC key; PKCS#1 v1.5, or PSS with MGF1-SHA-256 and any salt
    ///     length, for an RSA key (what `openssl dgst -sha256 -sign` makes).
    ///   - digest: 32 bytes.
    /// - Returns: true when valid.
    public func verifies(_ signature: [UInt8], ofSHA256 digest: [UInt8]) -> Bool {
        guard digest.count == 32, !signature.isEmpty else { return false }
        return digest.withUnsafeBufferPointer { hash in
            signature.withUnsafeBufferPointer { tinyfire_public_key_verify_sha256(key, hash.baseAddress, $0.baseAddress, $0.count) == 0 }
        }
    }
}

/// Certificates and keys through mbedTLS, for trust evaluation.
package enum X509 {
    /// The linked mbedTLS version, e.g. `2.28.3`.
    package static var libraryVersion: String { String(cString: tinyfire_tls_library_version()) }

    /// The DER of every certificate in a PEM or DER file, or mbedTLS's error code.
    package static func readCertificates(file path: String) -> Result<[[UInt8]], CryptoError> {
        final class Collector { var items: [[UInt8]] = [] }
        let collector = Collector()
        let result = withExtendedLifetime(collector) {
            tinyfire_x509_read_file(path, Unmanaged.passUnretained(collector).toOpaque()) { context, der, length in
                guard let context, let der else { return }
                Unmanaged<Collector>.fromOpaque(context).takeUnretainedValue().items.append(
                    Array(UnsafeBufferPointer(start: der, count: length)))
            }
        }
        guard result == 0 else { return .failure(CryptoError(description: tlsErrorMessage(result))) }
        return .success(collector.items)
    }

    /// SHA-256 of a certificate's SubjectPublicKeyInfo; nil when the DER does not parse.
    package static func spkiSHA256(certificate der: UnsafeRawBufferPointer) -> [UInt8]? {
        var digest = [UInt8](repeating: 0, count: 32)
        let result = tinyfire_x509_spki_sha256(der.baseAddress?.assumingMemoryBound(to: UInt8.self), der.count, &digest)
        return result == 0 ? digest : nil
    }

    /// SHA-256 of the SubjectPublicKeyInfo of a PEM or DER public key or certificate file.
    package static func spkiSHA256(file path: String) -> Result<[UInt8], CryptoError> {
        var digest = [UInt8](repeating: 0, count: 32)
        let result = tinyfire_pk_file_spki_sha256(path, &digest)
        guard result == 0 else { return .failure(CryptoError(description: tlsErrorMessage(result))) }
        return .success(digest)
    }

    /// Subject and issuer distinguished names of a certificate ("" when it does not parse).
    package static func names(certificate der: UnsafeRawBufferPointer) -> (subject: String, issuer: String) {
        var subject = [CChar](repeating: 0, count: 512)
        var issuer = [CChar](repeating: 0, count: 512)
        _ = tinyfire_x509_names(
            der.baseAddress?.assumingMemoryBound(to: UInt8.self), der.count, &subject, subject.count, &issuer, issuer.count)
        return (cText(subject), cText(issuer))
    }

    /// What mbedTLS finds verifying `chain` (leaf first) against `anchors`.
    package struct Verification {
        /// mbedTLS's verification flags (0: trusted).
        package var flags: UInt32
        /// Whether the CRL file holds a CRL from the leaf's issuer.
        package var leafIssuerHasCRL: Bool
    }

    /// Verifies `chain` (DER, leaf first) against `anchors` (DER), with an optional CRL file and
    /// host name check.
    /// - Returns: the flags, or the error when the chain or the CRL does not parse.
    package static func verify(chain: [[UInt8]], anchors: [[UInt8]], crlFile: String?, host: String?) -> Result<Verification, CryptoError> {
        var flags: UInt32 = 0
        var leafIssuerHasCRL: Int32 = 0
        let result = withPointers(chain) { chainPointers, chainLengths in
            withPointers(anchors) { anchorPointers, anchorLengths in
                tinyfire_x509_verify(
                    chainPointers, chainLengths, Int32(chain.count), anchorPointers, anchorLengths, Int32(anchors.count), crlFile, host,
                    &flags, &leafIssuerHasCRL)
            }
        }
        guard result == 0 else { return .failure(CryptoError(description: tlsErrorMessage(result))) }
        return .success(Verification(flags: flags, leafIssuerHasCRL: leafIssuerHasCRL != 0))
    }

    /// Calls `body` with C arrays of pointers to and lengths of `items`.
    private static func withPointers<R>(
        _ items: [[UInt8]], _ body: (UnsafePointer<UnsafePointer<UInt8>?>, UnsafePointer<Int>) -> R
    ) -> R {
        let buffers = items.map { bytes -> UnsafeMutablePointer<UInt8> in
            let pointer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(1, bytes.count))
            pointer.initialize(from: bytes, count: bytes.count)
            return pointer
        }
        defer { for buffer in buffers { buffer.deallocate() } }
        let pointers: [UnsafePointer<UInt8>?] = buffers.map { UnsafePointer($0) }
        let lengths = items.map { $0.count }
        return pointers.withUnsafeBufferPointer { p in
            lengths.withUnsafeBufferPointer { l in
                // Both arrays have at least their storage (an empty array's base address may be
                // nil: pass a valid pointer with count 0).
                let noPointer: [UnsafePointer<UInt8>?] = [nil]
                let noLength = [0]
                if let pointerBase = p.baseAddress, let lengthBase = l.baseAddress { return body(pointerBase, lengthBase) }
                return noPointer.withUnsafeBufferPointer { np in
                    noLength.withUnsafeBufferPointer { nl in body(np.baseAddress.unsafelyUnwrapped, nl.baseAddress.unsafelyUnwrapped) }
                }
            }
        }
    }
}
