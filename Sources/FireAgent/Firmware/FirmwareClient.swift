import HTTPTypes
import TinyFireCore

/// The firmware flow's HTTP client on the core's `Engine`: the manifest and its signature
/// (small bodies read whole), the image (`ImageDownload`, to disk), and the sender of the report
/// queue. TLS (CA file, client certificate), the proxy and the timeouts are the server's
/// (`server.*`, `network.proxy`); the download's speed limits are `firmware.maxBytesPerSecond`
/// and `firmware.lowSpeedBytesPerSecond` over `firmware.lowSpeedTime`.
///
/// The fleet server's pins (`server.pins`) hold wherever it serves firmware too; another host (a
/// CDN) is checked against the CA bundle, and the manifest's signature covers the image either
/// way. Each connection is judged by its own host: a redirect to the fleet server meets its
/// pins, a redirect from it to a CDN the CA bundle.
///
/// Memory: the engine's connections (one 64 KiB read buffer each, at most two per host), a
/// fetched body up to its limit (64 KiB for a manifest), and 4 KiB of each report's answer.
package final class FirmwareClient: Sendable {
    /// Read buffer per connection: the image is written to disk in chunks of at most this.
    package static let readBufferSize = 64 << 10

    package let engine: Engine
    /// The judge of a TLS server on a host: the fleet server's host by its pins, any other by
    /// mbedTLS (nil).
    private let trustForHost: @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?

    /// The client for `config`.
    /// - Parameters:
    ///   - config: the whole config (server TLS, pins, proxy; the firmware section's limits).
    ///   - userAgent: the `User-Agent` of every request.
    ///   - loop: the event loop to run on, shared with the daemon's other clients (its owner
    ///     stops it after `shutdown`); nil: a loop of its own (`fire-agent-fwio`).
    /// - Throws: `AgentError` naming a pin that is not `sha256//BASE64`.
    package convenience init(config: AgentConfig, userAgent: String, loop: EventLoop? = nil) throws(AgentError) {
        self.init(server: try FleetServer(config: config, userAgent: userAgent), firmware: config.firmware, loop: loop)
    }

    /// The client of `server` (set up once by the daemon for all its clients).
    /// - Parameters:
    ///   - server: the fleet server: TLS, pins, proxy, timeouts, User-Agent.
    ///   - firmware: the firmware section (its rate and low-speed limits), if any.
    ///   - loop: the event loop to run on, shared; nil: a loop of its own (`fire-agent-fwio`).
    package init(server: FleetServer, firmware: AgentConfig.Firmware?, loop: EventLoop? = nil) {
        trustForHost = server.trustForHost
        let settings = server.firmwareSettings(firmware)
        engine = loop.map { Engine(settings: settings, loop: $0) } ?? Engine(settings: settings, name: "fire-agent-fwio")
    }

    /// Closes every connection and stops the engine's thread (on a shared loop: ends the
    /// engine's part of it).
    package func shutdown() { engine.shutdown() }

    /// How a server on `host` is judged: the fleet server by its pins, any other by mbedTLS.
    /// Transfers ask it with the host each connection went to (`transferJudgeTrust(host:)`).
    /// - Returns: nil for mbedTLS's validation alone, else a judge that gives the refusal.
    package func trust(forHost host: String) -> (@Sendable (TrustFacts) -> String?)? {
        trustForHost(host)
    }

    /// The sender of the report queue to `url` (the fleet server's pins for the fleet
    /// server's host, wherever it stands).
    package func queueSender(for url: AbsoluteURL) -> EngineQueueSender {
        EngineQueueSender(engine: engine, trustForHost: trustForHost)
    }

    /// What a GET came to.
    package enum Fetched: Sendable {
        /// The server answered (any status); the body is complete.
        case answered(status: Int, fields: HTTPFields, body: [UInt8])
        /// No complete answer: the reason in words, and the status when the head had arrived
        /// (the body then failed: too large, too slow).
        case failed(String, status: Int?)
    }

    /// GETs `url` whole, blocking the calling thread.
    /// - Parameters:
    ///   - url: what to fetch.
    ///   - headers: extra fields (`If-None-Match`).
    ///   - limit: the longest body kept; a longer one (announced or received) fails the fetch.
    ///   - timeout: the whole exchange's limit.
    /// - Returns: the answer or why there is none.
    package func fetch(_ url: AbsoluteURL, headers: HTTPHeaders, limit: Int, timeout: Duration) -> Fetched {
        let owner = FetchOwner(limit: limit, trust: trustForHost)
        var spec = RequestSpec(url: url, method: .get, headers: headers, body: nil, totalTimeout: timeout)
        spec.headers.update(name: "Accept-Encoding", value: "identity")
        engine.start(spec, owner: owner)
        return owner.result.wait { $0 }
    }
}

/// One small GET, read whole into memory (at most `limit` bytes).
private final class FetchOwner: PlainTransferOwner, @unchecked Sendable {
    // @unchecked: `sink` is made and read on the engine's loop thread only.
    let result = ConditionLocked<FirmwareClient.Fetched?>(nil)
    private let limit: Int
    private let trust: @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?
    private let refusal = Locked<String?>(nil)
    /// The final response's status, once its head arrived.
    private let status = Locked<Int?>(nil)
    private var sink: ByteArraySink?

    init(limit: Int, trust: @escaping @Sendable (String) -> (@Sendable (TrustFacts) -> String?)?) {
        self.limit = limit
        self.trust = trust
    }

    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> any ResponseBodySink {
        status.withLock { $0 = response.status.code }
        if let expectedLength, expectedLength > UInt64(limit) { throw .limitExceeded(limit: limit) }
        let sink = ByteArraySink(limit: limit, expectedLength: expectedLength)
        self.sink = sink
        return sink
    }

    func transferJudgeTrust(host: String) -> TrustJudgement {
        .judged(by: trust(host), keepingRefusalIn: refusal)
    }

    func transferDidFinish(
        _ outcome: Result<Void, TransferFailure>, request: SentRequestHead?, response: HTTPResponse?, report: TransferReport
    ) {
        let fetched: FirmwareClient.Fetched
        switch outcome {
        case .success:
            if let response {
                fetched = .answered(status: response.status.code, fields: response.headerFields, body: sink?.bytes ?? [])
            } else {
                fetched = .failed("no response", status: nil)
            }
        case .failure(let failure):
            fetched = .failed(refusal.withLock { $0 } ?? failure.description, status: status.withLock { $0 })
        }
        result.withLock { $0 = fetched }
    }
}
