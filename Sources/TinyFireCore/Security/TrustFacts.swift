/// What a TLS handshake presented and what mbedTLS verified of it: the facts a trust decision is
/// made on (TinyFire hands them to the app's evaluators as `ServerTrust`; the agent checks them
/// itself). On a resumed connection they are the facts of the full handshake its session came
/// from, kept in the `TLSSession`.
///
/// Pins are checked against `verifiedPath`, never against what the server merely sent: a
/// certificate appended to a chain but not on its path is in `presented` only.
package struct TrustFacts: Sendable {
    /// The verified path, leaf first, up to the trust anchor, DER — or as far as a path could be
    /// built when the chain does not verify (see `verificationFlags`).
    package var verifiedPath: [[UInt8]]
    /// The certificates as the server sent them, leaf first, DER.
    package var presented: [[UInt8]]
    /// The host connected to (a name or an IP literal).
    package var host: String
    /// mbedTLS's verification flags for the chain against the anchors, CRLs and the host name
    /// (0: trusted).
    package var verificationFlags: UInt32
    /// For an IP host: whether the leaf lists it as an iPAddress SAN (mbedTLS checks DNS names
    /// only). nil for a name.
    package var leafHasHostIPAddress: Bool?
    /// The context the handshake ran under (its anchors, for evaluators that verify again).
    package let context: TLSContext

    /// mbedTLS's bit for a host name mismatch.
    package static let nameMismatch: UInt32 = 0x04
    /// mbedTLS's bit for a chain that does not end at a trust anchor.
    package static let notTrusted: UInt32 = 0x08

    /// The facts of the full handshake `stream` just finished with `host`.
    package init(stream: TLSStream, details: TLSStreamDetails, host: String) {
        verifiedPath = details.verifiedPath
        presented = details.peerCertificates
        self.host = host
        verificationFlags = stream.verificationFlags
        leafHasHostIPAddress = IPAddressBytes.parse(host).map { stream.peerHasIPAddress($0) }
        context = stream.context
    }

    /// The failures of default validation, in words; empty when the chain and the host check.
    /// - Parameters:
    ///   - validateHost: whether the host must match.
    ///   - ignored: verification flags not to count.
    package func defaultValidationFailures(validateHost: Bool, ignoring ignored: UInt32 = 0) -> [String] {
        var flags = verificationFlags & ~ignored
        if !validateHost { flags &= ~Self.nameMismatch }
        var reasons = tlsVerificationReasons(flags)
        if verifiedPath.isEmpty && reasons.isEmpty { reasons.append("no certificate path was verified") }
        return reasons + ipAddressFailure(validateHost: validateHost)
    }

    /// For an IP host whose leaf does not list it, the reason; otherwise nothing.
    package func ipAddressFailure(validateHost: Bool) -> [String] {
        validateHost && leafHasHostIPAddress == false ? ["the certificate has no iPAddress entry for \(host)"] : []
    }
}
