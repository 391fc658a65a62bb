import HTTPTypes
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What a request asks the engine to send.
struct RequestSpec: Sendable {
    var url: URL
    var method: HTTPMethod
    var headers: HTTPHeaders
    var body: Data?
    /// A body from files or a stream instead of `body`.
    var bodySource: RequestBodySource?
    /// Overrides the session's total timeout for this request.
    var totalTimeout: Duration?

    /// Bytes of request body; nil for a stream (unknown until it ends).
    var bodyLength: UInt64? {
        if let bodySource { return bodySource.length }
        return UInt64(body?.count ?? 0)
    }
    var hasBody: Bool { body != nil || bodySource != nil }

    /// The origin the caller addressed. Credentials — `Authorization`, `Cookie` and
    /// `Proxy-Authorization`, the request's own and the session's default ones — go to it only,
    /// never to another origin a redirect leads to (curl's rule without --location-trusted).
    let credentialOrigin: String

    init(url: URL, method: HTTPMethod, headers: HTTPHeaders, body: Data?, totalTimeout: Duration? = nil) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.totalTimeout = totalTimeout
        self.credentialOrigin = Self.origin(of: url)
    }

    /// The credential headers that stay with their origin.
    static let credentialHeaders = ["Authorization", "Cookie", "Proxy-Authorization"]

    /// `scheme://host:port`, lowercased, with the scheme's default port filled in.
    static func origin(of url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(url.host(percentEncoded: true)?.lowercased() ?? ""):\(port)"
    }

    init(_ request: URLRequest) throws(TinyFireError) {
        guard let url = request.url else { throw .invalidURL(url: "", reason: "the request has no URL") }
        self.init(
            url: url, method: request.method ?? .get, headers: request.headers, body: request.httpBody,
            totalTimeout: request.timeoutInterval.flatMap(Duration.timeInterval))
    }

    var urlRequest: URLRequest {
        var request = URLRequest(url: url, method: method, headers: headers)
        request.httpBody = body
        return request
    }
}

/// The request object behind a transfer: it chooses the body sink and receives the outcome.
/// Called on the loop thread.
protocol TransferOwner: AnyObject, Sendable {
    /// Whether `cancel()` was called before the transfer started.
    var isCancelled: Bool { get }
    /// Whether the transfer started suspended.
    var isSuspended: Bool { get }
    /// Who decides redirects; nil follows them.
    var transferRedirectHandler: (any RedirectHandler)? { get }
    /// Whether anyone listens to progress.
    var transferWantsProgress: Bool { get }
    /// The sink for the final response's body.
    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink
    /// The final response head arrived (redirects are not reported). True holds the body
    /// back (reading pauses at once) until the owner lets it flow.
    func transferDidReceiveResponse(_ response: HTTPResponse, request: HTTPRequest) -> Bool
    /// A redirect is about to be followed.
    func transferWillRedirect(to redirect: URLRequest, for response: HTTPResponse)
    /// Bytes moved: request body sent of total, response body received of expected.
    func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool)
    /// The transfer ended; called exactly once.
    func transferDidFinish(
        _ result: Result<SinkOutput, TinyFireError>, request: HTTPRequest?, response: HTTPResponse?,
        metrics: TransferMetrics)
}

/// Timings and counts for one request, redirects included.
public struct TransferMetrics: Sendable {
    /// URLs redirected to, in order.
    public var redirects: [String] = []
    /// Whether the final hop ran on a kept-alive connection.
    public var reusedConnection = false
    /// Whether a stale kept-alive connection forced one automatic retry.
    public var retriedOnStaleConnection = false
    /// The peer address of the final hop (`127.0.0.1:8080`, `[::1]:443`).
    public var remoteAddress: String?
    /// DNS time of the final hop, when it resolved.
    public var nameLookup: Duration?
    /// TCP connect time of the final hop, when it connected.
    public var connect: Duration?
    /// TLS handshake time of the final hop; nil for plain HTTP and reused connections.
    public var tlsHandshake: Duration?
    /// What the final hop's TLS handshake negotiated (nil for plain HTTP).
    public var tls: TLSDetails?
    /// From the start of the final hop to the last request byte written.
    public var requestSent: Duration?
    /// From the start of the final hop to the first response byte.
    public var timeToFirstByte: Duration?
    /// From the start of the request to its end.
    public var total: Duration = .zero
    /// Request bytes written on the final hop (head and body).
    public var requestBytesSent: UInt64 = 0
    /// Response bytes read on the final hop (head and body, as on the wire).
    public var responseBytesReceived: UInt64 = 0
    /// Response body bytes after de-chunking, before decompression.
    public var responseBodyBytes: UInt64 = 0
    /// Response body bytes after decompression.
    public var decodedBodyBytes: UInt64 = 0
}

/// Owns the loop, the pool and the live transfers of one `Session`.
final class Engine: @unchecked Sendable {
    let configuration: SessionConfiguration
    /// Trust evaluators by host (nil: default validation for every host).
    let serverTrustManager: ServerTrustManager?
    private let loopResult: Result<EventLoop, TinyFireError>
    /// The I/O loop, nil when it could not start.
    var loop: EventLoop? { try? loopResult.get() }
    private var pool: ConnectionPool?
    /// Loaded on the first https request (loop thread).
    private var tlsContextResult: Result<TLSContext, TinyFireError>?
    /// The last TLS session per origin, offered on reconnect (loop thread).
    private var tlsSessions: [PoolKey: TLSSession] = [:]
    /// Live transfers by owner, loop-confined.
    private var active: [ObjectIdentifier: Transfer] = [:]

    init(configuration: SessionConfiguration, serverTrustManager: ServerTrustManager? = nil) {
        self.configuration = configuration
        self.serverTrustManager = serverTrustManager
        do {
            let loop = try EventLoop(name: "tinyfire-io")
            loopResult = .success(loop)
            pool = ConnectionPool(
                loop: loop, maxConnectionsPerHost: configuration.maxConnectionsPerHost,
                idleTimeout: configuration.idleConnectionTimeout)
        } catch {
            loopResult = .failure(error)
        }
    }

    /// Starts a transfer for `owner` (from any thread).
    func start(_ spec: RequestSpec, owner: TransferOwner) {
        switch loopResult {
        case .failure(let error):
            owner.transferDidFinish(.failure(error), request: nil, response: nil, metrics: TransferMetrics())
        case .success(let loop):
            loop.execute { [self] in
                guard let pool else { return }
                let transfer = Transfer(spec: spec, owner: owner, engine: self, loop: loop, pool: pool)
                active[ObjectIdentifier(owner)] = transfer
                transfer.start()
            }
        }
    }

    /// Cancels `owner`'s transfer, if it is running (from any thread).
    func cancel(_ owner: TransferOwner) {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in
            active[ObjectIdentifier(owner)]?.cancel(with: .explicitlyCancelled)
        }
    }

    /// The session's TLS context, loaded once (loop thread).
    func tlsContext() throws(TinyFireError) -> TLSContext {
        if let tlsContextResult { return try tlsContextResult.get() }
        let result: Result<TLSContext, TinyFireError>
        do throws(TinyFireError) {
            result = .success(try TLSContext(configuration.tls))
        } catch {
            result = .failure(error)
        }
        tlsContextResult = result
        return try result.get()
    }

    func tlsSession(for key: PoolKey) -> TLSSession? {
        configuration.tls.sessionResumption ? tlsSessions[key] : nil
    }

    func storeTLSSession(_ session: TLSSession, for key: PoolKey) {
        guard configuration.tls.sessionResumption else { return }
        tlsSessions[key] = session
    }

    /// Pauses `owner`'s transfer (from any thread).
    func suspendTransfer(_ owner: TransferOwner) {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in active[ObjectIdentifier(owner)]?.setSuspended(true) }
    }

    /// Holds back or lets go reading for `owner`'s transfer (from any thread).
    func setFlowPaused(_ owner: TransferOwner, _ paused: Bool) {
        setFlowPaused(owner) { paused }
    }

    /// Pauses or continues reading `owner`'s body as `paused` says when the loop gets to it.
    func setFlowPaused(_ owner: TransferOwner, _ paused: @escaping @Sendable () -> Bool) {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in active[ObjectIdentifier(owner)]?.setFlowPaused(paused()) }
    }

    /// Continues `owner`'s paused transfer (from any thread).
    func resumeTransfer(_ owner: TransferOwner) {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in active[ObjectIdentifier(owner)]?.setSuspended(false) }
    }

    /// Called by a transfer when it ends (loop thread).
    func transferEnded(_ owner: TransferOwner) {
        active[ObjectIdentifier(owner)] = nil
    }

    /// Fails every live transfer, closes every connection and stops the loop.
    func shutdown() {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in
            for transfer in Array(active.values) { transfer.cancel(with: .sessionDeinitialized) }
            pool?.closeAll()
            pool = nil
        }
        // The stop flag is checked after tasks run, so the task above runs first.
        loop.shutdown()
    }
}

/// Drives one request through DNS, connect, exchange, redirects and the stale-connection
/// retry: a state machine over the events of its connection and timers. Loop-confined.
final class Transfer: HTTPExchangeDelegate, ConnectionPoolWaiter, @unchecked Sendable {
    /// Bytes of a redirect response's body read and dropped before closing the connection
    /// instead: 64 KiB.
    static let redirectDrainLimit = 64 * 1024

    private let owner: TransferOwner
    private let engine: Engine
    private let loop: EventLoop
    private let pool: ConnectionPool
    private let configuration: SessionConfiguration
    private var spec: RequestSpec

    private(set) var phase: TransferPhase = .resolving
    private var finished = false
    private let started = Instant.now()
    private var hopStarted = Instant.now()
    private var connectDeadline = Instant.now()
    private var handshakeDeadline = Instant.now()
    private var lastActivity = Instant.now()
    private var lowSpeedWindowStart = Instant.now()
    private var lowSpeedWindowBytes: UInt64 = 0
    private var timer: TimerHandle?
    private var resolveGeneration: UInt64 = 0

    private var key = PoolKey(scheme: "http", host: "", port: 80)
    private var holdsReservedSlot = false
    private var connector: Connector?
    private var connection: HTTPConnection?
    private var retriedStale = false
    private var forceNewConnection = false

    private var head: [UInt8] = []
    private var expectContinue = false
    private var request: HTTPRequest?
    private var response: HTTPResponse?
    private var sink: ResponseBodySink?
    private var decoder: ContentDecoder?
    private var redirectTarget: RequestSpec?
    private var drained = 0
    /// A redirect handler has not answered yet: the redirect's head and the body so far.
    private var pendingRedirect: (head: ResponseHead, target: RequestSpec)?
    private var pendingRedirectBody: [UInt8] = []
    private var pendingRedirectExchangeDone = false
    private var expectedBodyLength: UInt64?
    private var suspended = false
    /// Reading held back because the owner's consumer is behind (a slow stream handler).
    private var flowPaused = false
    /// Reading held back until this instant by `maxReceiveBytesPerSecond`.
    private var throttledUntil: Instant?
    /// Start and bytes of the current hop, for `maxReceiveBytesPerSecond`.
    private var rateStart = Instant.now()
    private var rateBytes: UInt64 = 0
    /// Not reading: suspended by the caller, held back by the consumer or by the receive-rate
    /// limit. Only the total timeout (and the end of the throttle) runs meanwhile.
    private var paused: Bool { suspended || flowPaused || throttledUntil != nil }
    private var hopBytesSent: UInt64 = 0
    private var hopBytesReceived: UInt64 = 0
    /// Request body bytes sent on this hop, without chunk framing.
    private var uploadPayloadSent: UInt64 = 0
    private var metrics = TransferMetrics()

    init(spec: RequestSpec, owner: TransferOwner, engine: Engine, loop: EventLoop, pool: ConnectionPool) {
        self.spec = spec
        self.owner = owner
        self.engine = engine
        self.loop = loop
        self.pool = pool
        self.configuration = engine.configuration
    }

    // MARK: - Start and hops

    func start() {
        suspended = owner.isSuspended
        if owner.isCancelled {
            finish(.failure(.explicitlyCancelled))
            return
        }
        startHop()
    }

    private func startHop() {
        do {
            try prepareHead()
        } catch {
            finish(.failure(error))
            return
        }
        hopStarted = .now()
        acquireConnection()
    }

    /// Builds the request head for the current hop.
    private func prepareHead() throws(TinyFireError) {
        let url = spec.url
        let text = url.absoluteString
        guard let scheme = url.scheme?.lowercased() else { throw .invalidURL(url: text, reason: "no scheme") }
        guard scheme == "http" || scheme == "https" else {
            throw .invalidURL(url: text, reason: "unsupported scheme \(quoted(scheme))")
        }
        guard var host = url.host(percentEncoded: true), !host.isEmpty else {
            throw .invalidURL(url: text, reason: "no host")
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let defaultPort = scheme == "https" ? 443 : 80
        let port = url.port ?? defaultPort
        guard (1...65535).contains(port) else { throw .invalidURL(url: text, reason: "port \(port) out of range") }
        key = PoolKey(scheme: scheme, host: host, port: port)

        var path = url.path(percentEncoded: true)
        if path.isEmpty { path = "/" }
        if let query = url.query(percentEncoded: true) { path += "?" + query }
        let hostForHeader = host.contains(":") ? "[\(host)]" : host
        let authority = port == defaultPort ? hostForHeader : "\(hostForHeader):\(port)"

        var headers = spec.headers.merging(defaults: configuration.headers)
        if RequestSpec.origin(of: url) != spec.credentialOrigin {
            for name in RequestSpec.credentialHeaders { headers.remove(name: name) }
        }
        if !configuration.automaticDecompression && spec.headers.value(for: "Accept-Encoding") == nil {
            headers.remove(name: "Accept-Encoding")
        }
        guard let method = HTTPRequest.Method(spec.method.rawValue) else {
            throw .invalidRequest(reason: "invalid method \(quoted(spec.method.rawValue))")
        }
        var request = HTTPRequest(method: method, scheme: scheme, authority: authority, path: path, headerFields: headers.fields)
        if request.headerFields.contains(.connection) { request.headerFields[.connection] = nil }
        let framing: RequestBodyFraming
        if spec.hasBody {
            framing = spec.bodyLength.map { .contentLength($0) } ?? .chunked
            expectContinue = false
            if let threshold = configuration.expectContinueThreshold, spec.bodyLength.map({ $0 >= UInt64(threshold) }) ?? true,
                !request.headerFields.contains(.expect)
            {
                request.headerFields[.expect] = "100-continue"
                expectContinue = true
            }
        } else if ["POST", "PUT", "PATCH", "QUERY"].contains(spec.method.rawValue) {
            framing = .contentLength(0)
        } else {
            framing = .none
        }
        do {
            try RequestHeadSerializer.serialize(
                request, framing: framing, limit: configuration.maxHeaderBlockBytes, into: &head)
        } catch {
            switch error {
            case .invalidMethod(let method): throw .invalidRequest(reason: "invalid method \(quoted(method))")
            case .invalidTarget(let target): throw .invalidRequest(reason: "invalid request target \(quoted(target))")
            case .invalidHeader(let name): throw .invalidRequest(reason: "header \(name) contains CR, LF or NUL")
            case .tooLarge(let limit): throw .invalidRequest(reason: "request head exceeds \(limit) bytes")
            }
        }
        self.request = request
    }

    private func acquireConnection() {
        phase = .waitingForConnection
        let forceNew = forceNewConnection
        switch pool.lease(key, forceNew: forceNew, waiter: self) {
        case .reuse(let connection):
            metrics.nameLookup = nil
            metrics.connect = nil
            use(connection)
        case .connect:
            holdsReservedSlot = true
            resolve()
        case .wait:
            armTimer()
        }
    }

    func poolSlotMayBeAvailable() {
        guard !finished, phase == .waitingForConnection else { return }
        acquireConnection()
    }

    private func resolve() {
        phase = .resolving
        connectDeadline = .now() + configuration.connectTimeout
        armTimer()
        resolveGeneration += 1
        let generation = resolveGeneration
        let host = key.host
        let port = key.port
        let resolveStart = Instant.now()
        // getaddrinfo cannot be interrupted and may answer long after this transfer ended (its
        // connect timeout): the answer holds the transfer weakly, so a finished request and its
        // Session are released at once, and only the loop (whose descriptors stay open until
        // it is released) waits for the answer.
        let weakSelf = WeakLoopReference(self)
        let loop = self.loop
        DNSResolver.resolve(host: host, port: port) { result in
            loop.execute { weakSelf.value?.resolved(result, generation: generation, started: resolveStart) }
        }
    }

    /// The resolver answered (loop thread); ignored unless this transfer still waits for it.
    private func resolved(_ result: Result<[SocketAddress], DNSResolver.ResolutionError>, generation: UInt64, started: Instant) {
        guard !finished, generation == resolveGeneration, phase == .resolving else { return }
        metrics.nameLookup = Instant.now().since(started)
        switch result {
        case .failure(let error):
            fail(.nameResolutionFailed(message: error.message), codes: [error.status])
        case .success(let addresses):
            connect(to: addresses)
        }
    }

    private func connect(to addresses: [SocketAddress]) {
        phase = .connecting
        guard !addresses.isEmpty else {
            fail(.nameResolutionFailed(message: "no IPv4 or IPv6 address"))
            return
        }
        let connectStart = Instant.now()
        let connector = Connector(loop: loop, addresses: addresses)
        self.connector = connector
        connector.start { [self] result in
            self.connector = nil
            switch result {
            case .failure(let failure):
                fail(.connectFailed(attempts: failure.attempts), codes: failure.codes)
            case .success(let connected):
                metrics.connect = Instant.now().since(connectStart)
                do throws(TinyFireError) {
                    let connection = try HTTPConnection(
                        key: key, fd: connected.fd, remoteAddress: connected.address, loop: loop,
                        readBufferSize: configuration.readBufferSize)
                    holdsReservedSlot = false
                    pool.didOpen(connection)
                    if key.scheme == "https" {
                        startTLS(on: connection)
                    } else {
                        use(connection)
                    }
                } catch {
                    finish(.failure(error))
                }
            }
        }
    }

    /// Runs the TLS handshake on a new connection, checks the name for IP hosts, saves the
    /// session, then starts the exchange.
    private func startTLS(on connection: HTTPConnection) {
        phase = .tlsHandshake
        let stream: TLSStream
        do throws(TinyFireError) {
            let context = try engine.tlsContext()
            let host = key.host
            let isAddress = IPAddressBytes.parse(host) != nil
            stream = try TLSStream(context: context, fd: connection.fd, serverName: isAddress ? nil : host)
        } catch {
            connection.abort()
            finish(.failure(error))
            return
        }
        let offered = engine.tlsSession(for: key)
        if let offered { stream.offer(offered) }
        self.connection = connection
        let started = Instant.now()
        handshakeDeadline = started + configuration.tls.handshakeTimeout
        armTimer()
        connection.startTLS(stream) { [self] result in
            switch result {
            case .failed(let reason):
                connection.abort()
                self.connection = nil
                fail(reason)
            case .done:
                metrics.tlsHandshake = Instant.now().since(started)
                var details = stream.details
                // A resumed handshake received no certificate: it is judged on what the full
                // handshake it continues presented and verified, by the same evaluators.
                let trust: ServerTrust
                if details.resumed, let offered {
                    trust = offered.trust
                    details.peerCertificates = trust.presentedCertificates.map(\.der)
                    details.verifiedPath = trust.certificates.map(\.der)
                } else {
                    trust = serverTrust(of: stream, details: details)
                }
                guard evaluateTrust(trust) else {
                    connection.abort()
                    self.connection = nil
                    return
                }
                metrics.tls = details
                if !details.resumed, let session = TLSSession(trust: trust), stream.saveSession(into: session) {
                    engine.storeTLSSession(session, for: key)
                }
                use(connection)
            }
        }
    }

    /// What a full handshake presented and what mbedTLS verified of it.
    private func serverTrust(of stream: TLSStream, details: TLSDetails) -> ServerTrust {
        let context = stream.context
        // mbedTLS checks DNS names only: an address is checked against the certificate's
        // iPAddress entries (never against a DNS name spelling it).
        return ServerTrust(
            certificates: details.verifiedPath.map(Certificate.init(der:)),
            presentedCertificates: details.peerCertificates.map(Certificate.init(der:)), host: key.host,
            verificationFlags: stream.verificationFlags,
            leafHasHostIPAddress: IPAddressBytes.parse(key.host).map { stream.peerHasIPAddress($0) },
            anchors: { context.anchorCertificates })
    }

    /// Runs the session's evaluator for the host (or default validation) on a finished
    /// handshake. On failure the transfer is finished and false returned.
    private func evaluateTrust(_ trust: ServerTrust) -> Bool {
        let host = key.host
        do {
            if let manager = engine.serverTrustManager, let evaluator = try manager.serverTrustEvaluator(forHost: host) {
                try evaluator.evaluate(trust, forHost: host)
                return true
            }
        } catch let error as TinyFireError {
            finish(.failure(error))
            return false
        } catch {
            finish(.failure(.serverTrustEvaluationFailed(reason: .customEvaluationFailed(host: host, error: error))))
            return false
        }
        let reasons = trust.defaultValidationFailures(validateHost: true)
        guard reasons.isEmpty else {
            fail(.certificateVerificationFailed(reasons: reasons))
            return false
        }
        return true
    }

    private func use(_ connection: HTTPConnection) {
        self.connection = connection
        phase = .sendingRequest
        hopBytesSent = 0
        hopBytesReceived = 0
        uploadPayloadSent = 0
        drained = 0
        metrics.responseBodyBytes = 0
        metrics.decodedBodyBytes = 0
        metrics.timeToFirstByte = nil
        metrics.requestSent = nil
        metrics.reusedConnection = connection.isReused
        metrics.remoteAddress = connection.remoteAddressDescription
        lastActivity = .now()
        lowSpeedWindowStart = lastActivity
        lowSpeedWindowBytes = 0
        rateStart = lastActivity
        rateBytes = 0
        throttledUntil = nil
        armTimer()
        connection.start(
            head: head, body: spec.body ?? Data(), bodySource: spec.bodySource, expectContinue: expectContinue,
            isHeadRequest: spec.method == .head,
            limits: ResponseParser.Limits(maxHeaderBlockBytes: configuration.maxHeaderBlockBytes),
            delegate: self)
        if paused { connection.setReadingPaused(true) }
    }

    // MARK: - Exchange events

    func exchangeDidSend(bytes: Int) {
        hopBytesSent += UInt64(bytes)
        lastActivity = .now()
        lowSpeedWindowBytes += UInt64(bytes)
        if spec.hasBody {
            uploadPayloadSent =
                connection?.bodyPayloadSent ?? (hopBytesSent > UInt64(head.count) ? hopBytesSent - UInt64(head.count) : 0)
            if owner.transferWantsProgress {
                owner.transferProgress(upload: (uploadPayloadSent, spec.bodyLength), download: nil, final: false)
            }
        }
    }

    func exchangeDidSendRequest() {
        if phase == .sendingRequest { phase = .awaitingResponse }
        metrics.requestSent = Instant.now().since(hopStarted)
    }

    func exchangeDidReceive(bytes: Int) {
        if hopBytesReceived == 0 { metrics.timeToFirstByte = Instant.now().since(hopStarted) }
        hopBytesReceived += UInt64(bytes)
        lastActivity = .now()
        lowSpeedWindowBytes += UInt64(bytes)
        if let rate = configuration.maxReceiveBytesPerSecond { throttle(received: bytes, rate: rate) }
    }

    /// Holds reading back while the hop's bytes are ahead of `rate`: the next read waits until
    /// the bytes so far are due (so the average over the hop stays at `rate`, give or take one
    /// read buffer).
    private func throttle(received bytes: Int, rate: Int) {
        rateBytes += UInt64(bytes)
        let due = rateStart + .seconds(Double(rateBytes) / Double(max(1, rate)))
        guard due > lastActivity + .milliseconds(2), throttledUntil == nil else { return }
        throttledUntil = due
        connection?.setReadingPaused(true)
        armTimer()
    }

    func exchangeDidReceiveInformational(_ head: ResponseHead) {}

    func exchangeDidReceiveHead(_ head: ResponseHead) throws {
        phase = .receivingBody
        var fields = HTTPFields()
        for field in head.fields {
            if let name = HTTPField.Name(field.name) { fields.append(HTTPField(name: name, value: field.value)) }
        }
        let status = HTTPResponse.Status(code: head.status, reasonPhrase: head.reason)
        let response = HTTPResponse(status: status, headerFields: fields)
        self.response = response

        if let target = try redirect(for: head) {
            guard let handler = owner.transferRedirectHandler, let request = owner as? Request else {
                redirectTarget = target
                owner.transferWillRedirect(to: target.urlRequest, for: response)
                return
            }
            if let decision = ask(handler, for: request, target: target, head: head, response: response) {
                guard let next = decision else {
                    try prepareFinalResponse(head)
                    return
                }
                redirectTarget = apply(next, to: target)
                owner.transferWillRedirect(to: next, for: response)
            } else {
                pendingRedirect = (head, target)
            }
            return
        }
        try prepareFinalResponse(head)
    }

    /// Sets up decoding and the sink for the response that ends the transfer.
    private func prepareFinalResponse(_ head: ResponseHead) throws {
        guard let response else { return }
        var expected: UInt64?
        if case .contentLength(let n) = head.framing { expected = n }
        expectedBodyLength = expected
        if configuration.automaticDecompression && spec.method != .head, head.framing != .none {
            if let coding = try ContentCoding.from(headerValues: head.listValues("Content-Encoding")) {
                decoder = try ContentDecoder(coding: coding)
                expected = nil
            }
        }
        if let request, owner.transferDidReceiveResponse(response, request: request) {
            // The app decides first (onHTTPResponse with a disposition): nothing more is read
            // until it answers; bytes already read reach the sink, which holds them.
            setFlowPaused(true)
        }
        sink = try owner.transferMakeSink(for: response, expectedLength: expected)
    }

    /// Asks the redirect handler. Returns its answer when it answered before returning (nil
    /// inside means "do not follow"); returns nil when the answer will come later, through
    /// the loop.
    private func ask(
        _ handler: any RedirectHandler, for request: Request, target: RequestSpec, head: ResponseHead, response: HTTPResponse
    ) -> URLRequest?? {
        let window = RedirectDecisionWindow()
        handler.request(request, willBeRedirectedTo: target.urlRequest, for: response) { [weak self] decision in
            guard !window.deliver(decision), let self else { return }
            self.loop.execute { self.redirectDecided(decision) }
        }
        return window.close()
    }

    /// The redirect handler answered after returning.
    private func redirectDecided(_ decision: URLRequest?) {
        guard !finished, let (head, target) = pendingRedirect, let response else { return }
        pendingRedirect = nil
        let buffered = pendingRedirectBody
        pendingRedirectBody = []
        if let next = decision {
            let spec = apply(next, to: target)
            owner.transferWillRedirect(to: next, for: response)
            if pendingRedirectExchangeDone || connection == nil {
                follow(spec)
            } else {
                redirectTarget = spec
                drained = buffered.count
            }
            return
        }
        do {
            try prepareFinalResponse(head)
            try buffered.withUnsafeBytes { try deliverBody($0) }
        } catch {
            connection?.abort()
            connection = nil
            fail(reason(for: error))
            return
        }
        if pendingRedirectExchangeDone { completeFinalResponse() }
    }

    /// The next hop as the handler rewrote it.
    private func apply(_ request: URLRequest, to target: RequestSpec) -> RequestSpec {
        var spec = target
        spec.url = request.url ?? target.url
        spec.method = request.method ?? target.method
        spec.headers = request.headers
        spec.body = request.httpBody
        return spec
    }

    func exchangeDidReceiveBody(_ bytes: UnsafeRawBufferPointer) throws {
        metrics.responseBodyBytes += UInt64(bytes.count)
        if pendingRedirect != nil {
            guard pendingRedirectBody.count + bytes.count <= Self.redirectDrainLimit else {
                throw RedirectError(reason: .redirectBodyTooLarge(limit: Self.redirectDrainLimit))
            }
            pendingRedirectBody.append(contentsOf: bytes)
            return
        }
        if redirectTarget != nil {
            drained += bytes.count
            if drained > Self.redirectDrainLimit { throw RedirectDrainAbort() }
            return
        }
        try deliverBody(bytes)
        if owner.transferWantsProgress {
            owner.transferProgress(upload: nil, download: (metrics.responseBodyBytes, expectedBodyLength), final: false)
        }
    }

    private func deliverBody(_ bytes: UnsafeRawBufferPointer) throws {
        guard let sink else { return }
        if let decoder {
            try decoder.decode(bytes) { decoded in
                metrics.decodedBodyBytes += UInt64(decoded.count)
                try sink.write(decoded)
            }
        } else {
            metrics.decodedBodyBytes += UInt64(bytes.count)
            try sink.write(bytes)
        }
    }

    func exchangeDidComplete(trailers: [RawHeaderField]) {
        connection = nil
        if pendingRedirect != nil {
            pendingRedirectExchangeDone = true
            return
        }
        if let target = redirectTarget {
            follow(target)
            return
        }
        completeFinalResponse()
    }

    private func completeFinalResponse() {
        do {
            try decoder?.finish()
            let output = try sink?.finish() ?? SinkOutput.none
            if owner.transferWantsProgress {
                let upload = spec.hasBody ? (uploadPayloadSent, spec.bodyLength ?? uploadPayloadSent) : nil
                owner.transferProgress(upload: upload, download: (metrics.responseBodyBytes, expectedBodyLength), final: true)
            }
            finish(.success(output))
        } catch {
            fail(reason(for: error))
        }
    }

    func exchangeDidFail(_ failure: ExchangeFailure) {
        connection = nil
        if case .delegate(let error) = failure.kind, error is RedirectDrainAbort, let target = redirectTarget {
            follow(target)
            return
        }
        if !failure.receivedResponseBytes && failure.connectionWasReused && spec.method.isIdempotent && !retriedStale
            && spec.bodySource?.isReplayable ?? true
        {
            // A kept-alive connection the server had closed: one retry on a fresh connection.
            retriedStale = true
            metrics.retriedOnStaleConnection = true
            forceNewConnection = true
            sink?.discard()
            sink = nil
            acquireConnection()
            return
        }
        switch failure.kind {
        case .io(let code):
            fail(.connectionError(code: code, message: errnoMessage(code)))
        case .tls(let code):
            fail(.tlsFailed(code: code, message: tlsErrorMessage(code)))
        case .bodySource(let message):
            fail(.requestBodyReadFailed(message: message))
        case .parse(let error):
            fail(.invalidResponse(error))
        case .delegate(let error):
            fail(reason(for: error))
        }
    }

    private func reason(for error: any Error) -> TransferError.Reason {
        switch error {
        case let error as SinkError:
            switch error {
            case .limitExceeded(let limit): return .bodyLimitExceeded(limit: limit)
            case .fileSizeExceeded(let limit): return .fileSizeExceeded(limit: limit)
            case .writeFailed(let path, let message): return .fileWriteFailed(path: path, message: message)
            case .resumeRejected(let message): return .resumeRejected(message: message)
            }
        case let error as ContentDecodingError:
            return .contentDecodingFailed(error)
        case let error as RedirectError:
            return error.reason
        default:
            return .connectionError(code: 0, message: "\(error)")
        }
    }

    // MARK: - Redirects

    private struct RedirectDrainAbort: Error {}
    private struct RedirectError: Error { var reason: TransferError.Reason }

    /// The next hop when `head` is a redirect to follow, nil otherwise.
    private func redirect(for head: ResponseHead) throws -> RequestSpec? {
        guard [301, 302, 303, 307, 308].contains(head.status), configuration.maxRedirects > 0,
            let location = head.firstValue("Location")
        else { return nil }
        guard metrics.redirects.count < configuration.maxRedirects else {
            throw RedirectError(reason: .tooManyRedirects(limit: configuration.maxRedirects))
        }
        guard let target = URL(string: location, relativeTo: spec.url)?.absoluteURL,
            let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https",
            target.host(percentEncoded: true)?.isEmpty == false
        else {
            throw RedirectError(reason: .invalidRedirect(location: location))
        }
        if spec.url.scheme?.lowercased() == "https" && scheme == "http" && !configuration.allowsInsecureRedirects {
            throw RedirectError(reason: .insecureRedirect(location: target.absoluteString))
        }
        var next = spec
        next.url = target
        if head.status == 303 && spec.method != .head
            || (head.status == 301 || head.status == 302) && spec.method == .post
        {
            next.method = .get
            next.body = nil
            next.bodySource = nil
            for name in ["Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding"] {
                next.headers.remove(name: name)
            }
        }
        // The next request as a redirect handler sees it: without the credentials that will
        // not be sent (prepareHead also keeps the session's defaults from that origin).
        if RequestSpec.origin(of: target) != spec.credentialOrigin {
            for name in RequestSpec.credentialHeaders { next.headers.remove(name: name) }
        }
        return next
    }

    private func follow(_ target: RequestSpec) {
        metrics.redirects.append(target.url.absoluteString)
        redirectTarget = nil
        pendingRedirect = nil
        pendingRedirectBody = []
        pendingRedirectExchangeDone = false
        expectedBodyLength = nil
        response = nil
        decoder = nil
        sink = nil
        forceNewConnection = false
        spec = target
        startHop()
    }

    // MARK: - Timeouts

    private func armTimer() {
        if let timer { loop.cancel(timer) }
        var deadline: Instant?
        func consider(_ candidate: Instant) {
            if let current = deadline, current <= candidate { return }
            deadline = candidate
        }
        if let total = totalTimeout { consider(started + total) }
        if let throttledUntil { consider(throttledUntil) }
        if paused {
            // Paused: only the total timeout (and the end of a throttle) runs.
            if let deadline {
                timer = loop.schedule(at: deadline) { [weak self] in
                    self?.timer = nil
                    self?.checkTimeouts()
                }
            } else {
                timer = nil
            }
            return
        }
        switch phase {
        case .resolving, .connecting:
            consider(connectDeadline)
        case .tlsHandshake:
            consider(handshakeDeadline)
        case .sendingRequest, .awaitingResponse, .receivingBody:
            consider(lastActivity + configuration.idleTimeout)
            if let limit = configuration.lowSpeedLimit { consider(lowSpeedWindowStart + limit.window) }
        case .waitingForConnection:
            break
        }
        guard let deadline else {
            timer = nil
            return
        }
        timer = loop.schedule(at: deadline) { [weak self] in
            self?.timer = nil
            self?.checkTimeouts()
        }
    }

    private var totalTimeout: Duration? { spec.totalTimeout ?? configuration.totalTimeout }

    /// Pauses or continues reading; the idle and low-speed clocks restart on resume.
    func setSuspended(_ on: Bool) {
        guard !finished, suspended != on else { return }
        suspended = on
        applyPause()
    }

    /// Holds reading back while the consumer catches up (or lets it continue).
    func setFlowPaused(_ on: Bool) {
        guard !finished, flowPaused != on else { return }
        flowPaused = on
        applyPause()
    }

    private func applyPause() {
        connection?.setReadingPaused(paused)
        if !paused {
            lastActivity = .now()
            lowSpeedWindowStart = lastActivity
            lowSpeedWindowBytes = 0
            // A pause is not credit for a burst afterwards.
            rateStart = lastActivity
            rateBytes = 0
        }
        armTimer()
    }

    private func checkTimeouts() {
        guard !finished else { return }
        let now = Instant.now()
        if let total = totalTimeout, started + total <= now {
            fail(.timedOut(.total, limit: total))
            return
        }
        if let until = throttledUntil, until <= now {
            // The throttle ends: reading continues, and the pause was not idleness. The
            // low-speed window keeps counting (the limited rate is the rate).
            throttledUntil = nil
            lastActivity = now
            connection?.setReadingPaused(paused)
        }
        if paused {
            armTimer()
            return
        }
        switch phase {
        case .resolving, .connecting:
            if connectDeadline <= now {
                fail(.timedOut(.connect, limit: configuration.connectTimeout))
                return
            }
        case .tlsHandshake:
            if handshakeDeadline <= now {
                fail(.timedOut(.tlsHandshake, limit: configuration.tls.handshakeTimeout))
                return
            }
        case .sendingRequest, .awaitingResponse, .receivingBody:
            if lastActivity + configuration.idleTimeout <= now {
                fail(.timedOut(.idle, limit: configuration.idleTimeout))
                return
            }
            if let limit = configuration.lowSpeedLimit, lowSpeedWindowStart + limit.window <= now {
                let elapsed = max(now.since(lowSpeedWindowStart).seconds, 0.001)
                let rate = Double(lowSpeedWindowBytes) / elapsed
                if rate < Double(limit.bytesPerSecond) {
                    fail(.lowSpeed(bytesPerSecond: limit.bytesPerSecond, window: limit.window, measuredBytesPerSecond: Int(rate)))
                    return
                }
                lowSpeedWindowStart = now
                lowSpeedWindowBytes = 0
            }
        case .waitingForConnection:
            break
        }
        armTimer()
    }

    // MARK: - End

    /// Ends the transfer with `error` (cancel, session going away).
    func cancel(with error: TinyFireError) {
        finish(.failure(error))
    }

    private func fail(_ reason: TransferError.Reason, codes: [Int32] = []) {
        let error = TransferError(
            method: spec.method.rawValue, url: spec.url.absoluteString, host: key.host, phase: phase,
            reason: reason, bytesSent: hopBytesSent, bytesReceived: hopBytesReceived, systemCodes: codes)
        finish(.failure(.sessionTaskFailed(error)))
    }

    private func finish(_ result: Result<SinkOutput, TinyFireError>) {
        guard !finished else { return }
        finished = true
        if let timer { loop.cancel(timer) }
        timer = nil
        connector?.cancel()
        connector = nil
        connection?.abort()
        connection = nil
        if holdsReservedSlot {
            holdsReservedSlot = false
            pool.connectFailed(key)
        }
        pool.removeWaiter(self, for: key)
        if case .failure = result { sink?.discard() }
        sink = nil
        decoder = nil
        metrics.total = Instant.now().since(started)
        metrics.requestBytesSent = hopBytesSent
        metrics.responseBytesReceived = hopBytesReceived
        engine.transferEnded(owner)
        owner.transferDidFinish(result, request: request, response: response, metrics: metrics)
    }
}

/// Lets a redirect handler answer synchronously (the usual case) or later: `deliver` from the
/// completion and `close` after the handler returned race under one lock, so exactly one of
/// them sees the answer.
final class RedirectDecisionWindow: Sendable {
    private let state = Mutex<(open: Bool, decision: URLRequest??)>((true, nil))

    /// Stores the decision while the window is open; false once it closed.
    func deliver(_ decision: URLRequest?) -> Bool {
        state.withLock { state in
            guard state.open else { return false }
            state.decision = .some(decision)
            return true
        }
    }

    /// Closes the window; the decision if it came in time.
    func close() -> URLRequest?? {
        state.withLock { state in
            state.open = false
            return state.decision
        }
    }
}

/// IP literals as bytes, for the iPAddress check.
enum IPAddressBytes {
    /// 4 bytes for IPv4, 16 for IPv6, nil for a name.
    static func parse(_ host: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }
}
