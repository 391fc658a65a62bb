import HTTPTypes

/// Whoever started a transfer and hears how it goes: TinyFire's `Request`, or the agent's own
/// small client. All calls come on the engine's loop thread (the flags may be read from the
/// thread that starts the transfer); `transferDidFinish` comes exactly once.
package protocol TransferOwner: AnyObject, Sendable {
    /// The key the engine files the owner's transfer under (`ObjectIdentifier(self)`; Embedded
    /// Swift cannot take the identifier of an existential).
    var transferOwnerID: ObjectIdentifier { get }
    /// Whether the owner was cancelled before the transfer started.
    var isCancelled: Bool { get }
    /// Whether the transfer starts suspended.
    var isSuspended: Bool { get }
    /// Whether redirects wait for `transferDecideRedirect`; false follows them by the policy.
    var transferAsksRedirects: Bool { get }
    /// Whether anyone listens to progress.
    var transferWantsProgress: Bool { get }
    /// The sink for the final response's body.
    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink
    /// The final response head arrived (redirects are not reported). True holds the body back
    /// (reading pauses at once) until the owner lets it flow (`Engine.setFlowPaused`).
    func transferDidReceiveResponse(_ response: HTTPResponse, request: SentRequestHead) -> Bool
    /// A redirect is about to be followed.
    func transferWillRedirect(to redirect: RequestSpec, for response: HTTPResponse)
    /// Asks the owner about a redirect to `target`; it answers through `answer`, once, before
    /// returning or later from any thread. False: there is no one to ask any more, follow as
    /// the policy says.
    func transferDecideRedirect(to target: RequestSpec, for response: HTTPResponse, sent: SentRequestHead?, answer: RedirectAnswer)
        -> Bool
    /// How to judge the server of `host` once its TLS handshake finished.
    func transferJudgeTrust(host: String) -> TrustJudgement
    /// Bytes moved: request body sent of total, response body received of expected.
    func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool)
    /// The transfer ended; on success the sink it made holds the body.
    func transferDidFinish(
        _ result: Result<Void, TransferFailure>, request: SentRequestHead?, response: HTTPResponse?, report: TransferReport)
}

/// An owner that starts at once, follows redirects by the policy without being asked, holds
/// no response back and takes no progress: the agent's transfers (a queued record, a manifest,
/// an image, `fire-agent request`). It writes the sink, the trust judgement and the ending;
/// the rest is this extension's. An owner overrides what it needs (progress, asked redirects).
package protocol PlainTransferOwner: TransferOwner {}

extension PlainTransferOwner {
    package var transferOwnerID: ObjectIdentifier { ObjectIdentifier(self) }
    package var isCancelled: Bool { false }
    package var isSuspended: Bool { false }
    package var transferAsksRedirects: Bool { false }
    package var transferWantsProgress: Bool { false }
    package func transferDidReceiveResponse(_ response: HTTPResponse, request: SentRequestHead) -> Bool { false }
    package func transferWillRedirect(to redirect: RequestSpec, for response: HTTPResponse) {}
    package func transferDecideRedirect(
        to target: RequestSpec, for response: HTTPResponse, sent: SentRequestHead?, answer: RedirectAnswer
    ) -> Bool { false }
    package func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool) {}
}

/// Why a transfer ended without a complete response.
package enum TransferFailure: Error, Sendable {
    /// The URL cannot be requested (no host, a scheme other than http or https).
    case invalidURL(url: String, reason: String)
    /// The request head cannot be written (a field with CR or LF, a head past its limit).
    case invalidRequest(reason: String)
    /// The TLS configuration cannot be loaded (a CA file, a client certificate).
    case invalidTLSConfiguration(reason: String)
    /// The owner cancelled it.
    case explicitlyCancelled
    /// The engine shut down under it.
    case engineShutDown
    /// The system refused a thread or descriptor the transfer needed.
    case resourceExhausted(String)
    /// It failed on the way: connecting, at TLS, at the proxy, on the wire, in the sink.
    case failed(TransferError)
    /// The owner's trust evaluator or redirect decision refused; the owner keeps the reason.
    case refusedByOwner
}

extension TransferFailure: CustomStringConvertible {
    /// What went wrong, in words (the agent's logs; the library maps it to `TinyFireError`).
    package var description: String {
        switch self {
        case .invalidURL(let url, let reason): "invalid URL \(url): \(reason)"
        case .invalidRequest(let reason): "the request cannot be sent: \(reason)"
        case .invalidTLSConfiguration(let reason): "the TLS configuration cannot be loaded: \(reason)"
        case .explicitlyCancelled: "cancelled"
        case .engineShutDown: "the engine shut down"
        case .resourceExhausted(let what): "out of system resources: \(what)"
        case .failed(let error): error.description
        case .refusedByOwner: "refused by its owner"
        }
    }
}

/// How to judge a server once its TLS handshake finished.
package enum TrustJudgement {
    /// mbedTLS's verification against the configured anchors, and the host name.
    case defaultValidation
    /// The owner's evaluator, run on a thread of its own (it may read files or take long; the
    /// handshake timeout still bounds the transfer). True trusts; on false the transfer ends
    /// with `.refusedByOwner`, the owner having kept its reason.
    case evaluate(@Sendable (TrustFacts) -> Bool)
    /// Refused before any evaluation (the owner could not find its evaluator); the owner kept
    /// its reason.
    case refuse
}

extension TrustJudgement {
    /// The judgement for an owner with an optional judge that gives a reason to refuse:
    /// mbedTLS's validation alone when there is none, else the judge on a thread of its own, its
    /// reason kept in `refusal` (the owner's failure text when the transfer ends refused).
    package static func judged(by judge: (@Sendable (TrustFacts) -> String?)?, keepingRefusalIn refusal: Locked<String?>)
        -> TrustJudgement
    {
        guard let judge else { return .defaultValidation }
        return .evaluate { facts in
            let reason = judge(facts)
            refusal.withLock { $0 = reason }
            return reason == nil
        }
    }
}

/// The owner's answer about a redirect: `give` it once, from any thread, before
/// `transferDecideRedirect` returns or later. nil delivers the redirect response itself; a
/// rewrite follows it (as the policy built it, or changed).
package final class RedirectAnswer: @unchecked Sendable {
    private let state = Locked<(open: Bool, answer: Result<RedirectRewrite?, TransferFailure>?)>((true, nil))
    /// Where a late answer goes (the transfer, through its loop); emptied when the transfer
    /// ends, so an answer that never comes holds nothing.
    private let late: Locked<(@Sendable (Result<RedirectRewrite?, TransferFailure>) -> Void)?>

    init(late: @escaping @Sendable (Result<RedirectRewrite?, TransferFailure>) -> Void) {
        self.late = Locked(late)
    }

    /// The decision.
    package func give(_ answer: Result<RedirectRewrite?, TransferFailure>) {
        let early = state.withLock { state in
            guard state.open else { return false }
            state.answer = answer
            return true
        }
        if early { return }
        late.withLock { $0 }?(answer)
    }

    /// Closes the early window; the answer if it came in it.
    func close() -> Result<RedirectRewrite?, TransferFailure>? {
        state.withLock { state in
            state.open = false
            return state.answer
        }
    }

    /// Drops the route back to the transfer.
    func abandon() {
        late.withLock { $0 = nil }
    }
}

/// What one transfer measured, for the owner's metrics.
package struct TransferReport: Sendable {
    /// URLs redirected to, in order.
    package var redirects: [String] = []
    /// Whether the final hop ran on a kept-alive connection.
    package var reusedConnection = false
    /// Whether a stale kept-alive connection forced one automatic retry.
    package var retriedOnStaleConnection = false
    /// The peer address of the final hop.
    package var remoteAddress: String?
    /// DNS time of the final hop, when it resolved.
    package var nameLookup: Duration?
    /// TCP connect time of the final hop, when it connected.
    package var connect: Duration?
    /// TLS handshake time of the final hop.
    package var tlsHandshake: Duration?
    /// What the final hop's TLS handshake negotiated (nil for plain HTTP).
    package var tls: TLSStreamDetails?
    /// From the start of the final hop to the last request byte written.
    package var requestSent: Duration?
    /// From the start of the final hop to the first response byte.
    package var timeToFirstByte: Duration?
    /// From the start of the request to its end.
    package var total: Duration = .zero
    /// Request bytes written on the final hop (head and body).
    package var requestBytesSent: UInt64 = 0
    /// Response bytes read on the final hop (head and body, as on the wire).
    package var responseBytesReceived: UInt64 = 0
    /// Response body bytes after de-chunking, before decompression.
    package var responseBodyBytes: UInt64 = 0
    /// Response body bytes after decompression.
    package var decodedBodyBytes: UInt64 = 0

    package init() {}
}

/// What an engine's transfers run with: limits, timeouts, the proxy, TLS and the default
/// header fields. Start from `standard` and change what differs: TinyFire from its
/// `SessionConfiguration` (whose defaults are `standard`'s), the agent's clients from
/// `FleetServer`, the commands from their options.
package struct EngineSettings: Sendable {
    package var connectTimeout: Duration
    package var idleTimeout: Duration
    package var totalTimeout: Duration?
    package var lowSpeedLimit: LowSpeedLimit?
    package var maxReceiveBytesPerSecond: Int?
    package var maxHeaderBlockBytes: Int
    package var readBufferSize: Int
    package var maxConnectionsPerHost: Int
    package var idleConnectionTimeout: Duration
    package var maxRedirects: Int
    package var allowsInsecureRedirects: Bool
    package var automaticDecompression: Bool
    /// Sent with every request unless the request sets the field itself.
    package var defaultFields: HTTPFields
    package var expectContinueThreshold: Int?
    package var tls: TLSConfiguration
    package var proxy: ProxySettings

    /// The library's defaults (`SessionConfiguration`'s and the commands'): connect 30 s, idle
    /// 60 s, no whole-exchange limit, 64 KiB of response head, a 128 KiB read buffer, 6
    /// connections per origin kept idle 60 s, 10 redirects none of them to plain HTTP from
    /// HTTPS, gzip and deflate decoded, `Expect: 100-continue` from 1 MiB, no default fields,
    /// the system's trust, no proxy. Memory: one 128 KiB read buffer per open connection.
    package static let standard = EngineSettings(
        connectTimeout: .seconds(30), idleTimeout: .seconds(60), totalTimeout: nil, lowSpeedLimit: nil, maxReceiveBytesPerSecond: nil,
        maxHeaderBlockBytes: ResponseParser.Limits.defaultMaxHeaderBlockBytes, readBufferSize: 128 * 1024, maxConnectionsPerHost: 6,
        idleConnectionTimeout: .seconds(60), maxRedirects: 10, allowsInsecureRedirects: false, automaticDecompression: true,
        defaultFields: HTTPFields(), expectContinueThreshold: 1024 * 1024, tls: TLSConfiguration(), proxy: .direct)

    private init(
        connectTimeout: Duration, idleTimeout: Duration, totalTimeout: Duration?, lowSpeedLimit: LowSpeedLimit?,
        maxReceiveBytesPerSecond: Int?, maxHeaderBlockBytes: Int, readBufferSize: Int, maxConnectionsPerHost: Int,
        idleConnectionTimeout: Duration, maxRedirects: Int, allowsInsecureRedirects: Bool, automaticDecompression: Bool,
        defaultFields: HTTPFields, expectContinueThreshold: Int?, tls: TLSConfiguration, proxy: ProxySettings
    ) {
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.totalTimeout = totalTimeout
        self.lowSpeedLimit = lowSpeedLimit
        self.maxReceiveBytesPerSecond = maxReceiveBytesPerSecond
        self.maxHeaderBlockBytes = maxHeaderBlockBytes
        self.readBufferSize = readBufferSize
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.idleConnectionTimeout = idleConnectionTimeout
        self.maxRedirects = maxRedirects
        self.allowsInsecureRedirects = allowsInsecureRedirects
        self.automaticDecompression = automaticDecompression
        self.defaultFields = defaultFields
        self.expectContinueThreshold = expectContinueThreshold
        self.tls = tls
        self.proxy = proxy
    }
}
