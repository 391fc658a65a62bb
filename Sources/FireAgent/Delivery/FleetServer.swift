import HTTPTypes
import TinyFireCore

/// The fleet server as every client of the agent reaches it, built once from `server.*`,
/// `network.proxy` and the User-Agent: the TLS set-up (CA file, client certificate), the pins
/// and the judge that applies them by host, the proxy, the timeouts. The telemetry engine and
/// the firmware client take their engine settings from it (`telemetrySettings`,
/// `firmwareSettings`), so the server is set up in one place whichever client talks to it.
///
/// Memory: the config's strings and the pins (32 bytes each); nothing grows.
package struct FleetServer: Sendable {
    /// The `User-Agent` the agent sends unless told otherwise: `fire-agent/VERSION TinyFire/VERSION`.
    package static let defaultUserAgent = "fire-agent/\(HTTPHeaders.tinyFireVersion) TinyFire/\(HTTPHeaders.tinyFireVersion)"

    /// `server.url`.
    package let url: AbsoluteURL
    /// `server.caFile`, `server.clientCertificate`, `server.clientKey`.
    package let tls: TLSConfiguration
    /// `network.proxy` (with the environment's, when the config says so).
    package let proxy: ProxySettings
    package let userAgent: String
    /// `server.connectTimeout`, `server.idleTimeout`, `server.requestTimeout`.
    package let connectTimeout: Duration
    package let idleTimeout: Duration
    package let requestTimeout: Duration
    /// How a TLS server on a host is judged: `server.url`'s host by `server.pins`, any other
    /// host (a CDN the manifest names, a redirect's target) by mbedTLS's validation alone (nil).
    package let trustForHost: @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?

    /// The server of `config`.
    /// - Parameters:
    ///   - config: the checked config.
    ///   - userAgent: the `User-Agent` of every request.
    /// - Throws: `AgentError` naming a pin that is not `sha256//BASE64`.
    package init(config: AgentConfig, userAgent: String = FleetServer.defaultUserAgent) throws(AgentError) {
        url = config.server.url
        var tls = TLSConfiguration()
        if let caFile = config.server.caFile { tls.caCertificateFiles = [caFile] }
        tls.clientCertificateFile = config.server.clientCertificate
        tls.clientKeyFile = config.server.clientKey
        self.tls = tls
        proxy = config.network.proxy
        self.userAgent = userAgent
        connectTimeout = config.server.connectTimeout
        idleTimeout = config.server.idleTimeout
        requestTimeout = config.server.requestTimeout
        trustForHost = Self.pinnedTrust(pins: try Self.pinDigests(config.server.pins), host: config.server.url.host)
    }

    /// Settings shared by every client of the server: its TLS, proxy, timeouts and User-Agent;
    /// 64 KiB at most of response head, one idle minute for a kept connection, no redirect to
    /// plain HTTP, no `Expect: 100-continue`.
    private func settings(
        totalTimeout: Duration?, readBufferSize: Int, maxConnectionsPerHost: Int, maxRedirects: Int, fields: HTTPFields,
        lowSpeedLimit: LowSpeedLimit? = nil, maxReceiveBytesPerSecond: Int? = nil
    ) -> EngineSettings {
        var settings = EngineSettings.standard
        settings.connectTimeout = connectTimeout
        settings.idleTimeout = idleTimeout
        settings.totalTimeout = totalTimeout
        settings.lowSpeedLimit = lowSpeedLimit
        settings.maxReceiveBytesPerSecond = maxReceiveBytesPerSecond
        settings.readBufferSize = readBufferSize
        settings.maxConnectionsPerHost = maxConnectionsPerHost
        settings.maxRedirects = maxRedirects
        settings.defaultFields = fields
        settings.defaultFields[.userAgent] = userAgent
        settings.expectContinueThreshold = nil
        settings.tls = tls
        settings.proxy = proxy
        return settings
    }

    /// What telemetry's writes run with: each whole exchange within `server.requestTimeout`, a
    /// 16 KiB read buffer (an answer is a status and a short message), `inFlight` connections
    /// (at least 2), 3 redirects, and the API's credentials (`Authorization`, added when a
    /// batch is sent: never stored in the queue).
    /// - Parameters:
    ///   - api: the InfluxDB API (its credentials).
    ///   - inFlight: `queue.inFlight`.
    package func telemetrySettings(api: AgentConfig.InfluxAPI, inFlight: Int) -> EngineSettings {
        var fields = HTTPFields()
        if let authorization = InfluxWrite.authorization(for: api) { fields[.authorization] = authorization }
        return settings(
            totalTimeout: requestTimeout, readBufferSize: 16 * 1024, maxConnectionsPerHost: max(2, inFlight), maxRedirects: 3,
            fields: fields)
    }

    /// What the firmware client runs with: no limit on a whole exchange (an image takes what it
    /// takes; manifest fetches set their own), the firmware section's rate and low-speed limits,
    /// a 64 KiB read buffer (`FirmwareClient.readBufferSize`: the image is written in chunks of
    /// at most this), 2 connections, 10 redirects (a CDN's), and no credentials of telemetry's.
    /// - Parameter firmware: the firmware section, if any.
    package func firmwareSettings(_ firmware: AgentConfig.Firmware?) -> EngineSettings {
        settings(
            totalTimeout: nil, readBufferSize: FirmwareClient.readBufferSize, maxConnectionsPerHost: 2, maxRedirects: 10,
            fields: HTTPFields(),
            lowSpeedLimit: firmware.map { LowSpeedLimit(bytesPerSecond: $0.lowSpeedBytesPerSecond, window: $0.lowSpeedTime) },
            maxReceiveBytesPerSecond: firmware?.maxBytesPerSecond)
    }

    // MARK: - Pins

    /// The SHA-256 digests `server.pins` names (`sha256//BASE64` each).
    /// - Throws: `AgentError` naming the first pin that is not one.
    static func pinDigests(_ pins: [String]) throws(AgentError) -> [[UInt8]] {
        var digests: [[UInt8]] = []
        for (index, pin) in pins.enumerated() {
            guard pin.hasPrefix("sha256//"), let digest = Base64.decode(String(pin.dropFirst(8))), digest.count == 32 else {
                throw AgentError(description: "server.pins[\(index)]: \(pin) is not sha256//BASE64")
            }
            digests.append(digest)
        }
        return digests
    }

    /// How a TLS server is judged under `server.pins`, by the host the connection went to
    /// (`transferJudgeTrust(host:)`, so a redirect is judged by where it leads, not by where the
    /// request started): `server.url`'s host by its pins (`pinRefusal`), any other host by
    /// mbedTLS's validation alone (nil), as docs/CONFIG.md says. Host names are compared
    /// without case, brackets or a trailing dot.
    /// - Parameters:
    ///   - pins: the digests of `server.pins`; empty: every host by mbedTLS's validation.
    ///   - host: `server.url`'s host.
    /// - Returns: the judge for a connection's host.
    static func pinnedTrust(pins: [[UInt8]], host: String?) -> @Sendable (String) -> (@Sendable (TrustFacts) -> String?)? {
        guard !pins.isEmpty, let host else { return { _ in nil } }
        let pinnedHost = comparableHost(host)
        let judge: @Sendable (TrustFacts) -> String? = { facts in pinRefusal(facts, pins: pins) }
        return { candidate in comparableHost(candidate) == pinnedHost ? judge : nil }
    }

    /// A host name as two spellings of one host compare: lowercased, without IPv6 brackets or a
    /// trailing dot.
    private static func comparableHost(_ host: String) -> String {
        var text = Substring(host.lowercased())
        if text.hasPrefix("[") && text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if text.hasSuffix(".") { text = text.dropLast() }
        return String(text)
    }

    /// Why a server is not trusted under `server.pins`, or nil when it is: default validation
    /// must pass and a certificate of the verified path must have one of `pins` as its
    /// SubjectPublicKeyInfo's SHA-256.
    static func pinRefusal(_ facts: TrustFacts, pins: [[UInt8]]) -> String? {
        let failures = facts.defaultValidationFailures(validateHost: true)
        guard failures.isEmpty else {
            var text = "\(facts.host) is not trusted:"
            for failure in failures { text += " " + failure }
            return text
        }
        var seen: [String] = []
        for certificate in facts.verifiedPath {
            guard let digest = certificate.withUnsafeBytes({ X509.spkiSHA256(certificate: $0) }) else { continue }
            if pins.contains(digest) { return nil }
            seen.append("sha256//" + Base64.encode(digest))
        }
        var text = "server.pins: no public key of \(facts.host)'s verified path is pinned (path:"
        for (index, pin) in seen.enumerated() { text += (index == 0 ? " " : ", ") + pin }
        return text + ")"
    }
}
