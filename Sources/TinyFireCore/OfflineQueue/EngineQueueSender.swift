import HTTPTypes

/// Sends the offline queue's records through the core's `Engine`: the agent's sender (the
/// library sends through its `Session` instead). Redirects follow the queue's rule: only a
/// 307 or 308 to the same origin; any other redirect is the answer that is judged.
///
/// Memory: per record in flight, the start of its answer (`QueuedSend.bodyLimit` bytes); the
/// rest of the body is read and dropped.
package final class EngineQueueSender: QueueSender {
    private let engine: Engine
    private let trust: @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?
    private let address: (@Sendable (String) -> String)?

    /// - Parameters:
    ///   - engine: sends the records (its settings: timeouts, TLS, proxy, default fields).
    ///   - trust: judges every TLS server instead of mbedTLS's validation alone (`--pin`):
    ///     nil trusts it, a reason refuses it, and the reason is the attempt's failure. Runs on
    ///     a thread of its own (`TrustJudgement.evaluate`). nil: mbedTLS's validation against
    ///     the engine's anchors and the host name.
    package convenience init(engine: Engine, trust: (@Sendable (TrustFacts) -> String?)? = nil) {
        self.init(engine: engine, trustForHost: { _ in trust })
    }

    /// - Parameters:
    ///   - engine: sends the records.
    ///   - trustForHost: the judge for a TLS server on a host, asked with the host each
    ///     connection went to (the agent's pins hold for the fleet server's host only); nil
    ///     for that host: mbedTLS's validation.
    ///   - address: where a record goes, asked with the URL it was queued with, at each
    ///     attempt (the agent's own batches go to the server configured now, not the one they
    ///     were queued for); nil: the queued URL.
    package init(
        engine: Engine, trustForHost: @escaping @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?,
        address: (@Sendable (String) -> String)? = nil
    ) {
        self.engine = engine
        self.trust = trustForHost
        self.address = address
    }

    package func sendQueued(_ request: QueuedSend, completion: @escaping @Sendable (QueueReply) -> Void) {
        let target = address?(request.url) ?? request.url
        guard let url = AbsoluteURL(target) else {
            completion(.noResponse("invalid URL \(target)"))
            return
        }
        var spec = RequestSpec(url: url, method: HTTPMethod(rawValue: request.method), headers: request.headers, body: nil)
        switch request.body {
        case .none: break
        case .bytes(let bytes): spec.body = ByteArrayBody(bytes)
        case .file(let path, let length): spec.bodySource = .segments([.file(path: path, offset: 0, length: length, fileSize: length)])
        }
        engine.start(spec, owner: QueueTransfer(request: request, url: url, trust: trust, completion: completion))
    }
}

/// One record's transfer.
private final class QueueTransfer: PlainTransferOwner, @unchecked Sendable {
    private let request: QueuedSend
    private let url: AbsoluteURL
    private let trust: @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?
    private let completion: @Sendable (QueueReply) -> Void
    /// Made and read on the engine's loop thread only.
    private var sink: ByteArraySink?
    /// Why `trust` refused the server (set on the evaluation's thread, read when it ends).
    private let refusal = Locked<String?>(nil)

    init(
        request: QueuedSend, url: AbsoluteURL, trust: @escaping @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?,
        completion: @escaping @Sendable (QueueReply) -> Void
    ) {
        self.request = request
        self.url = url
        self.trust = trust
        self.completion = completion
    }

    var transferAsksRedirects: Bool { true }

    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink {
        let sink = ByteArraySink(limit: request.bodyLimit, expectedLength: expectedLength, keepsPrefix: true)
        self.sink = sink
        return sink
    }

    func transferDecideRedirect(to target: RequestSpec, for response: HTTPResponse, sent: SentRequestHead?, answer: RedirectAnswer)
        -> Bool
    {
        // Only the addressed server's own answer counts: a captive portal's 302 to its login
        // page is the answer judged, not a delivery.
        let code = response.status.code
        let follows = (code == 307 || code == 308) && RequestSpec.origin(of: target.url) == RequestSpec.origin(of: url)
        answer.give(.success(follows ? RedirectRewrite(keeping: target) : nil))
        return true
    }

    func transferJudgeTrust(host: String) -> TrustJudgement {
        .judged(by: trust(host), keepingRefusalIn: refusal)
    }

    func transferDidFinish(
        _ result: Result<Void, TransferFailure>, request sent: SentRequestHead?, response: HTTPResponse?, report: TransferReport
    ) {
        switch result {
        case .success:
            guard let response else {
                completion(.noResponse("\(request.method) \(url.absoluteString): no response"))
                return
            }
            completion(.answered(response, body: sink?.bytes ?? []))
        case .failure(let failure):
            if let reason = refusal.withLock({ $0 }) {
                completion(.noResponse("\(request.method) \(url.absoluteString) failed: \(reason)"))
            } else if case .failed(let error) = failure {
                // Already "POST <url> failed while connecting: …", as the library says it.
                completion(.noResponse(error.description))
            } else {
                completion(.noResponse("\(request.method) \(url.absoluteString) failed: \(failure.description)"))
            }
        }
    }
}
