import Logging

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A certificate in DER form, with what the evaluators need from it.
public struct Certificate: Sendable, Hashable {
    /// The DER bytes.
    public let der: Data

    /// Wraps DER bytes.
    /// - Parameter der: the certificate.
    public init(der: Data) {
        self.der = der
    }

    /// Every certificate in a PEM or DER file.
    /// - Parameter path: the file.
    /// - Returns: the certificates, in file order.
    /// - Throws: `TinyFireError.invalidTLSConfiguration` naming the file and mbedTLS's reason.
    public static func load(contentsOf path: String) throws(TinyFireError) -> [Certificate] {
        let items: [[UInt8]]
        switch X509.readCertificates(file: path) {
        case .success(let read): items = read
        case .failure(let error): throw .invalidTLSConfiguration(reason: "cannot read certificates from \(path): \(error)")
        }
        guard !items.isEmpty else { throw .invalidTLSConfiguration(reason: "no certificate in \(path)") }
        return items.map { Certificate(der: Data($0)) }
    }

    /// The SHA-256 of the SubjectPublicKeyInfo, the value curl's `sha256//` pins hold; nil when
    /// the DER does not parse.
    public var publicKeySHA256: Data? {
        der.withUnsafeBytes { X509.spkiSHA256(certificate: $0) }.map { Data($0) }
    }

    /// `sha256//BASE64` of the public key (curl's `--pinnedpubkey` form).
    public var publicKeyPin: String? { publicKeySHA256.map { "sha256//" + $0.base64EncodedString() } }

    /// Subject and issuer distinguished names.
    public var names: (subject: String, issuer: String) {
        der.withUnsafeBytes { X509.names(certificate: $0) }
    }
}

/// What a server presented during the TLS handshake, and what mbedTLS made of it.
///
/// Pins are checked against `certificates`, the path mbedTLS built from the leaf and verified,
/// never against what the server merely sent: a certificate appended to a chain but not on
/// its path (a MITM adding the real server's public certificate behind its own) is in
/// `presentedCertificates` only. On a resumed connection these are the facts of the full
/// handshake that the session came from.
public struct ServerTrust: Sendable {
    /// The verified path, leaf first, up to the trust anchor that ends it — or as far as a
    /// path could be built when the chain does not verify (see `verificationFlags`).
    public let certificates: [Certificate]
    /// The certificates as the server sent them, leaf first. For diagnostics: never trusted
    /// for a pin.
    public let presentedCertificates: [Certificate]
    /// The host connected to (a name or an IP literal).
    public let host: String
    /// mbedTLS's verification flags for the chain against the session's trust anchors, CRLs
    /// and the host name (0: trusted).
    public let verificationFlags: UInt32
    /// For an IP host: whether the leaf lists it as an iPAddress SAN (mbedTLS does not check
    /// those). nil for a name.
    public let leafHasHostIPAddress: Bool?
    /// The session's trust anchors (loaded on demand).
    let anchors: @Sendable () -> [Certificate]
    /// The core's form, which the default validation runs on.
    let facts: TrustFacts

    /// The core's facts, in the public form.
    init(_ facts: TrustFacts) {
        certificates = facts.verifiedPath.map { Certificate(der: Data($0)) }
        presentedCertificates = facts.presented.map { Certificate(der: Data($0)) }
        host = facts.host
        verificationFlags = facts.verificationFlags
        leafHasHostIPAddress = facts.leafHasHostIPAddress
        let context = facts.context
        anchors = { context.anchorCertificates }
        self.facts = facts
    }

    /// mbedTLS's bit for a host name mismatch.
    static let nameMismatch: UInt32 = TrustFacts.nameMismatch
    /// mbedTLS's bit for a chain that does not end at a trust anchor.
    static let notTrusted: UInt32 = TrustFacts.notTrusted
    /// mbedTLS's bits for a CRL that cannot be relied on: not signed by a trusted CA, expired,
    /// from the future, or signed with an unacceptable hash, algorithm or key.
    static let unusableCRL: UInt32 = 0x10 | 0x20 | 0x0400 | 0x02_0000 | 0x04_0000 | 0x08_0000

    /// The leaf, as the server sent it.
    var leaf: Certificate? { presentedCertificates.first }

    /// The failures of default validation, in words; empty when the chain and the host check.
    /// - Parameter validateHost: whether the host must match.
    /// - Returns: the reasons.
    func defaultValidationFailures(validateHost: Bool, ignoring ignored: UInt32 = 0) -> [String] {
        facts.defaultValidationFailures(validateHost: validateHost, ignoring: ignored)
    }

    /// The failures of the presented chain verified against `pins` alone instead of the
    /// session's anchors: every signature from the leaf up to a pinned certificate, validity
    /// dates, and the host when `validateHost`. A leaf that is itself pinned needs no
    /// signature above it: the handshake proved that the server holds its private key.
    func failures(anchoredAt pins: [Certificate], leafIsPinned: Bool, validateHost: Bool) -> [String] {
        guard !pins.isEmpty, !presentedCertificates.isEmpty else { return ["no pinned certificate is in the chain"] }
        let isAddress = leafHasHostIPAddress != nil
        var flags: UInt32
        switch X509.verify(
            chain: presentedCertificates.map { Array($0.der) }, anchors: pins.map { Array($0.der) }, crlFile: nil,
            host: validateHost && !isAddress ? host : nil)
        {
        case .success(let verification): flags = verification.flags
        case .failure(let error): return ["the chain does not parse: \(error)"]
        }
        if leafIsPinned { flags &= ~Self.notTrusted }
        return tlsVerificationReasons(flags) + facts.ipAddressFailure(validateHost: validateHost)
    }
}

/// Decides whether a server's certificate chain is trusted for a host, as Alamofire's
/// `ServerTrustEvaluating`.
public protocol ServerTrustEvaluating: Sendable {
    /// Accepts the chain for `host` by returning, refuses it by throwing. Runs once per full
    /// handshake (a resumed session is judged on the chain its full handshake presented), on a
    /// background thread of its own, never on a session's I/O thread nor in the pool the app's
    /// async tasks run on: while it runs only its own connection waits, and the session's
    /// `tls.handshakeTimeout` still bounds it (a verdict after the timeout is ignored).
    /// - Parameters:
    ///   - trust: what the server presented.
    ///   - host: the host connected to.
    /// - Throws: `TinyFireError.serverTrustEvaluationFailed` saying why.
    func evaluate(_ trust: ServerTrust, forHost host: String) throws
}

/// Trusts chains that verify against the session's trust anchors, for the host.
public struct DefaultTrustEvaluator: ServerTrustEvaluating {
    /// Whether the certificate must name the host (default true).
    public let validateHost: Bool

    /// Creates the evaluator.
    /// - Parameter validateHost: default true.
    public init(validateHost: Bool = true) {
        self.validateHost = validateHost
    }

    /// Fails with `.defaultEvaluationFailed` and mbedTLS's reasons.
    /// - Parameters:
    ///   - trust: the chain.
    ///   - host: the host.
    public func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        let reasons = trust.defaultValidationFailures(validateHost: validateHost)
        guard reasons.isEmpty else {
            throw TinyFireError.serverTrustEvaluationFailed(
                reason: .evaluationFailed(host: host, evaluator: "DefaultTrustEvaluator", reasons: reasons))
        }
    }
}

/// Default validation plus revocation against CRL files. (mbedTLS has no OCSP: revocation is
/// CRL-only on TinyFire; keep the CRLs fresh on the device.)
public struct RevocationTrustEvaluator: ServerTrustEvaluating {
    /// CRL files (PEM or DER).
    public let crlFiles: [String]
    /// Whether default validation runs too (default true).
    public let performDefaultValidation: Bool
    /// Whether the certificate must name the host (default true).
    public let validateHost: Bool

    /// Creates the evaluator.
    /// - Parameters:
    ///   - crlFiles: the revocation lists.
    ///   - performDefaultValidation: default true.
    ///   - validateHost: default true.
    public init(crlFiles: [String], performDefaultValidation: Bool = true, validateHost: Bool = true) {
        self.crlFiles = crlFiles
        self.performDefaultValidation = performDefaultValidation
        self.validateHost = validateHost
    }

    /// Fails when the leaf is not covered by a CRL from its issuer (an unknown issuer is a
    /// failure, not a skipped check, as OpenSSL's `X509_V_FLAG_CRL_CHECK` and curl's
    /// `--crlfile`), when a certificate of the verified path is revoked, or when a CRL cannot
    /// be relied on (not signed by a trusted CA, expired, from the future, weak signature) or
    /// read. Issuers are looked up in the configured CA files and directories.
    /// - Parameters:
    ///   - trust: the chain.
    ///   - host: the host.
    public func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        func failure(_ reasons: [String]) -> TinyFireError {
            .serverTrustEvaluationFailed(reason: .evaluationFailed(host: host, evaluator: "RevocationTrustEvaluator", reasons: reasons))
        }
        if performDefaultValidation {
            try DefaultTrustEvaluator(validateHost: validateHost).evaluate(trust, forHost: host)
        }
        let path = trust.certificates
        guard let leaf = path.first else { throw failure(["no certificate path was verified"]) }
        let anchors = trust.anchors()
        var covered = false
        for file in crlFiles {
            let verification: X509.Verification
            switch X509.verify(chain: path.map { Array($0.der) }, anchors: anchors.map { Array($0.der) }, crlFile: file, host: nil) {
            case .success(let result): verification = result
            case .failure(let error): throw failure(["cannot read CRL \(file): \(error)"])
            }
            let revoked: UInt32 = 0x02
            let problems = verification.flags & (revoked | ServerTrust.unusableCRL)
            if problems != 0 {
                throw failure(tlsVerificationReasons(problems).map { "\($0) (CRL \(file))" })
            }
            covered = covered || verification.leafIssuerHasCRL
        }
        guard covered else {
            let files = crlFiles.isEmpty ? "no CRL file is configured" : "none in \(crlFiles.joined(separator: ", "))"
            throw failure(["no CRL from the leaf's issuer (\(leaf.names.issuer)): \(files); revocation cannot be checked"])
        }
    }
}

/// Trusts only chains containing one of the pinned certificates.
public struct PinnedCertificatesTrustEvaluator: ServerTrustEvaluating {
    /// The pinned certificates.
    public let certificates: [Certificate]
    /// Whether a self-signed (or privately issued) pinned certificate is accepted as its own
    /// anchor (default false).
    public let acceptSelfSignedCertificates: Bool
    /// Whether default validation runs too (default true).
    public let performDefaultValidation: Bool
    /// Whether the certificate must name the host (default true).
    public let validateHost: Bool

    /// Creates the evaluator.
    /// - Parameters:
    ///   - certificates: the pins (at least one).
    ///   - acceptSelfSignedCertificates: default false.
    ///   - performDefaultValidation: default true.
    ///   - validateHost: default true.
    public init(
        certificates: [Certificate], acceptSelfSignedCertificates: Bool = false, performDefaultValidation: Bool = true,
        validateHost: Bool = true
    ) {
        self.certificates = certificates
        self.acceptSelfSignedCertificates = acceptSelfSignedCertificates
        self.performDefaultValidation = performDefaultValidation
        self.validateHost = validateHost
    }

    /// With default validation (the default): the chain must verify against the session's
    /// anchors for the host, and a pinned certificate must be on the verified path. With
    /// `acceptSelfSignedCertificates`, a chain that fails only for want of a trusted anchor
    /// passes when its leaf is self-signed and is itself pinned.
    ///
    /// Without default validation: the leaf must be pinned itself, or a path from the leaf
    /// must verify (every signature) up to a pinned certificate; validity dates and, unless
    /// `validateHost` is false, the host are still checked. Whether the pin chains to a
    /// system anchor is not.
    /// - Parameters:
    ///   - trust: the chain.
    ///   - host: the host.
    public func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        func failure(_ reasons: [String]) -> TinyFireError {
            .serverTrustEvaluationFailed(
                reason: .evaluationFailed(host: host, evaluator: "PinnedCertificatesTrustEvaluator", reasons: reasons))
        }
        let pinned = Set(certificates)
        let leafIsPinned = trust.leaf.map { pinned.contains($0) } ?? false
        if performDefaultValidation {
            var reasons = trust.defaultValidationFailures(validateHost: validateHost)
            let onlyUntrusted = trust.verificationFlags & ~(validateHost ? 0 : ServerTrust.nameMismatch) == ServerTrust.notTrusted
            if !reasons.isEmpty, acceptSelfSignedCertificates, onlyUntrusted, leafIsPinned, let leaf = trust.leaf {
                // Self-signed: the leaf verifies as its own anchor (mbedTLS accepts a leaf
                // found among the anchors only when it is self-issued).
                reasons = trust.failures(anchoredAt: [leaf], leafIsPinned: false, validateHost: validateHost)
                guard reasons.isEmpty else { throw failure(["the pinned leaf is not self-signed: "] + reasons) }
                return
            }
            guard reasons.isEmpty else { throw failure(reasons) }
            guard trust.certificates.contains(where: { pinned.contains($0) }) else {
                throw failure(["no certificate of the verified path is one of the \(certificates.count) pinned"])
            }
            return
        }
        let reasons = trust.failures(anchoredAt: certificates, leafIsPinned: leafIsPinned, validateHost: validateHost)
        guard reasons.isEmpty else { throw failure(["no path from the leaf to a pinned certificate verifies: "] + reasons) }
    }
}

/// Trusts only chains containing a public key whose SPKI SHA-256 is pinned.
public struct PublicKeysTrustEvaluator: ServerTrustEvaluating {
    /// The pinned SPKI SHA-256 digests.
    public let keys: [Data]
    /// Whether default validation runs too (default true).
    public let performDefaultValidation: Bool
    /// Whether the certificate must name the host (default true).
    public let validateHost: Bool

    /// Creates the evaluator from SPKI SHA-256 digests.
    /// - Parameters:
    ///   - keys: 32-byte digests.
    ///   - performDefaultValidation: default true.
    ///   - validateHost: default true.
    public init(keys: [Data], performDefaultValidation: Bool = true, validateHost: Bool = true) {
        self.keys = keys
        self.performDefaultValidation = performDefaultValidation
        self.validateHost = validateHost
    }

    /// Creates the evaluator from pins in curl's form, `sha256//BASE64` (several may be joined
    /// with `;`, as curl accepts).
    /// - Parameters:
    ///   - pins: the pins.
    ///   - performDefaultValidation: default true.
    ///   - validateHost: default true.
    /// - Throws: `TinyFireError.invalidTLSConfiguration` naming a malformed pin.
    public init(pins: [String], performDefaultValidation: Bool = true, validateHost: Bool = true) throws(TinyFireError) {
        var keys: [Data] = []
        for pin in pins.flatMap({ $0.split(separator: ";").map(String.init) }) {
            let text = pin.trimmingHTTPWhitespace()
            guard text.hasPrefix("sha256//"), let digest = Data(base64Encoded: String(text.dropFirst(8))), digest.count == 32 else {
                throw .invalidTLSConfiguration(reason: "pin \(quoted(text)) is not sha256// followed by a base64 SHA-256")
            }
            keys.append(digest)
        }
        self.init(keys: keys, performDefaultValidation: performDefaultValidation, validateHost: validateHost)
    }

    /// Creates the evaluator from public-key or certificate files (PEM or DER); each file's
    /// SubjectPublicKeyInfo is hashed.
    /// - Parameters:
    ///   - keyFiles: public keys (`openssl pkey -pubout`) or certificates.
    ///   - performDefaultValidation: default true.
    ///   - validateHost: default true.
    /// - Throws: `TinyFireError.invalidTLSConfiguration` naming a file that does not load.
    public init(keyFiles: [String], performDefaultValidation: Bool = true, validateHost: Bool = true) throws(TinyFireError) {
        var keys: [Data] = []
        for file in keyFiles {
            switch X509.spkiSHA256(file: file) {
            case .success(let digest): keys.append(Data(digest))
            case .failure(let error): throw .invalidTLSConfiguration(reason: "cannot read a public key from \(file): \(error)")
            }
        }
        self.init(keys: keys, performDefaultValidation: performDefaultValidation, validateHost: validateHost)
    }

    /// With default validation (the default): the chain must verify against the session's
    /// anchors for the host, and a certificate on the verified path must carry a pinned key.
    ///
    /// Without default validation: the leaf's key must be pinned (the handshake proved the
    /// server holds it), or a path from the leaf must verify (every signature) up to a
    /// certificate carrying a pinned key; validity dates and, unless `validateHost` is false,
    /// the host are still checked.
    /// - Parameters:
    ///   - trust: the chain.
    ///   - host: the host.
    public func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        func failure(_ reasons: [String]) -> TinyFireError {
            .serverTrustEvaluationFailed(reason: .evaluationFailed(host: host, evaluator: "PublicKeysTrustEvaluator", reasons: reasons))
        }
        let pinned = Set(keys)
        if performDefaultValidation {
            let reasons = trust.defaultValidationFailures(validateHost: validateHost)
            guard reasons.isEmpty else { throw failure(reasons) }
            let onPath = trust.certificates.compactMap(\.publicKeySHA256)
            guard onPath.contains(where: { pinned.contains($0) }) else {
                let seen = onPath.map { "sha256//" + $0.base64EncodedString() }.joined(separator: ", ")
                throw failure(["no public key of the verified path is pinned (path: \(seen))"])
            }
            return
        }
        // Certificates with a pinned key: sent by the server, or the anchor its path reached.
        let carriers = (trust.presentedCertificates + trust.certificates).filter { $0.publicKeySHA256.map(pinned.contains) ?? false }
        let leafIsPinned = trust.leaf?.publicKeySHA256.map(pinned.contains) ?? false
        let reasons = trust.failures(anchoredAt: carriers, leafIsPinned: leafIsPinned, validateHost: validateHost)
        guard reasons.isEmpty else { throw failure(["no path from the leaf to a pinned key verifies: "] + reasons) }
    }
}

/// Runs several evaluators; all must pass.
public struct CompositeTrustEvaluator: ServerTrustEvaluating {
    /// The evaluators, in order.
    public let evaluators: [any ServerTrustEvaluating]

    /// Creates the evaluator.
    /// - Parameter evaluators: all must pass.
    public init(evaluators: [any ServerTrustEvaluating]) {
        self.evaluators = evaluators
    }

    /// Runs each; the first failure is thrown.
    /// - Parameters:
    ///   - trust: the chain.
    ///   - host: the host.
    public func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        for evaluator in evaluators { try evaluator.evaluate(trust, forHost: host) }
    }
}

/// Trusts everything. For debugging only: every use logs a warning through swift-log.
public struct DisabledTrustEvaluator: ServerTrustEvaluating {
    private let logger: Logger

    /// Creates the evaluator.
    /// - Parameter logger: where the warning goes; default label `org.tinyfire.trust`.
    public init(logger: Logger = Logger(label: "org.tinyfire.trust")) {
        self.logger = logger
    }

    /// Logs a warning and accepts.
    /// - Parameters:
    ///   - trust: the chain.
    ///   - host: the host.
    public func evaluate(_ trust: ServerTrust, forHost host: String) throws {
        logger.warning("TLS certificate NOT verified (DisabledTrustEvaluator)", metadata: ["host": "\(host)"])
    }
}

/// Maps hosts to evaluators, as Alamofire's `ServerTrustManager`. Host keys are exact names or
/// `*.example.com` wildcards (one label); exact names win.
open class ServerTrustManager: @unchecked Sendable {
    /// Whether a host without an evaluator fails (default true).
    public let allHostsMustBeEvaluated: Bool
    /// Evaluators by host.
    public let evaluators: [String: any ServerTrustEvaluating]

    /// Creates a manager.
    /// - Parameters:
    ///   - allHostsMustBeEvaluated: fail hosts without an evaluator; default true.
    ///   - evaluators: evaluators by host or wildcard.
    public init(allHostsMustBeEvaluated: Bool = true, evaluators: [String: any ServerTrustEvaluating]) {
        self.allHostsMustBeEvaluated = allHostsMustBeEvaluated
        self.evaluators = evaluators
    }

    /// The evaluator for `host`.
    /// - Parameter host: the host.
    /// - Returns: the evaluator, or nil when none applies and that is allowed.
    /// - Throws: `TinyFireError.serverTrustEvaluationFailed(.noRequiredEvaluator)` when none
    ///   applies and all hosts must be evaluated.
    open func serverTrustEvaluator(forHost host: String) throws -> (any ServerTrustEvaluating)? {
        let host = host.lowercased()
        if let evaluator = evaluators[host] { return evaluator }
        if let dot = host.firstIndex(of: ".") {
            if let evaluator = evaluators["*" + host[dot...]] { return evaluator }
        }
        guard !allHostsMustBeEvaluated else {
            throw TinyFireError.serverTrustEvaluationFailed(reason: .noRequiredEvaluator(host: host))
        }
        return nil
    }
}
