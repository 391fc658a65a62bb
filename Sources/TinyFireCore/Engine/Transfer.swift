import HTTPTypes

/// Executes one request's life: asks the pool for a connection, resolves and connects, runs the
/// TLS handshake and the trust decision, starts the exchange, routes the response's body, and
/// arms one timer. What to do at each event is decided by `RequestLifecycle` (redirects, the
/// stale-connection retry, the phase) and `TransferDeadlines` (every timeout and the receive
/// rate); this class only carries the decisions out. What belongs to the owner — the body's
/// sink, trust evaluators, redirect handlers — it reaches through `TransferOwner`. Loop-confined.
final class Transfer: HTTPExchangeDelegate, ConnectionRequester, @unchecked Sendable {
    private let owner: any TransferOwner
    private let ownerID: ObjectIdentifier
    private let engine: Engine
    private let loop: EventLoop
    private let pool: ConnectionPool
    private let configuration: EngineSettings
    // Loop-confined, so the runtime's exclusivity checks (two calls per mutation, on every body
    // chunk) are left out for the two cores.
    @exclusivity(unchecked) private var lifecycle: RequestLifecycle
    @exclusivity(unchecked) private var clock: TransferDeadlines
    /// The armed timer and when it fires. It is re-armed only when a deadline moves earlier; one
    /// that moved later is found out when the timer fires (one check instead of a timer per
    /// byte moved).
    private var timer: TimerHandle?
    private var timerDeadline: Instant?

    /// The current hop's origin, route and pool key.
    private var target: RequestTarget?
    private var key = PoolKey(scheme: "http", host: "", port: 80)
    /// The connection the pool builds for this transfer, while it does.
    private var build: PooledBuild?
    private var connection: HTTPConnection?
    /// Whether the proxy's credentials go with the next connection or request.
    private var proxyAuthentication = ProxyAuthentication()
    /// The last failure was on the way to the proxy or at it.
    private var failedAtProxy = false

    /// The current hop's request head, as bytes and as sent.
    private var head: [UInt8] = []
    private var expectContinue = false
    /// The current hop's head as sent (its `HTTPRequest` is built only when asked for).
    private var request: SentRequestHead?
    private var response: HTTPResponse?
    /// The head of a redirect response whose handler has not answered.
    private var redirectHead: ResponseHead?
    /// Its body so far (at most `RequestLifecycle.redirectBodyLimit` bytes).
    private var keptBody: [UInt8] = []
    private var sink: (any ResponseBodySink)?
    private var decoder: ContentDecoder?
    private var expectedBodyLength: UInt64?
    private var suspended = false
    /// Reading held back because the owner's consumer is behind (a slow stream handler).
    private var flowPaused = false
    private var hopBytesSent: UInt64 = 0
    private var hopBytesReceived: UInt64 = 0
    /// Request body bytes sent on this hop, without chunk framing.
    private var uploadPayloadSent: UInt64 = 0
    private var hopStarted = Instant.now()
    private var metrics = TransferReport()
    /// The owner's pending redirect decision, if it is deciding.
    private var redirectAnswer: RedirectAnswer?

    init(
        spec: RequestSpec, owner: any TransferOwner, engine: Engine, loop: EventLoop, pool: ConnectionPool
    ) {
        self.owner = owner
        ownerID = owner.transferOwnerID
        self.engine = engine
        self.loop = loop
        self.pool = pool
        let configuration = engine.settings
        self.configuration = configuration
        let asks = owner.transferAsksRedirects
        lifecycle = RequestLifecycle(
            spec: spec,
            policy: RedirectPolicy(
                maxRedirects: configuration.maxRedirects, allowsInsecureRedirects: configuration.allowsInsecureRedirects),
            asksRedirectHandler: asks)
        clock = TransferDeadlines(
            limits: TransferDeadlines.Limits(
                connect: configuration.connectTimeout, handshake: configuration.tls.handshakeTimeout,
                idle: configuration.idleTimeout, total: spec.totalTimeout ?? configuration.totalTimeout,
                lowSpeed: configuration.lowSpeedLimit, maxReceiveBytesPerSecond: configuration.maxReceiveBytesPerSecond),
            now: .now())
    }

    private var spec: RequestSpec { lifecycle.spec }
    private var finished: Bool { lifecycle.isFinished }
    /// Not reading: suspended by the caller, held back by the consumer or by the receive-rate
    /// limit.
    private var paused: Bool { clock.holdsReading }

    // MARK: - Start and hops

    func start() {
        suspended = owner.isSuspended
        if suspended { clock.setPaused(true, now: .now()) }
        if owner.isCancelled {
            finish(.failure(.explicitlyCancelled))
            return
        }
        perform(lifecycle.start())
    }

    /// Carries out what the lifecycle decided.
    private func perform(_ action: RequestLifecycle.Action) {
        switch action {
        case .none:
            break
        case .startHop:
            startHop()
        case .follow:
            startNextHop()
        case .redirect(let target, let followNow):
            if let response { owner.transferWillRedirect(to: target, for: response) }
            if followNow { startNextHop() }
        case .askRedirectHandler(let target):
            askRedirectHandler(about: target)
        case .deliverResponse:
            // Only `headReceived` answers this, and the head's handler carries it out.
            break
        case .deliverKeptResponse(let complete):
            guard let head = redirectHead else { return }
            deliverKept(head, complete: complete)
        case .complete:
            completeFinalResponse()
        case .retryOnFreshConnection:
            // A kept-alive connection the server had closed: one retry on a fresh connection.
            metrics.retriedOnStaleConnection = true
            sink?.discard()
            sink = nil
            acquireConnection(forceNew: true)
        case .fail(let reason):
            connection?.abort()
            connection = nil
            fail(reason)
        }
    }

    private func startHop() {
        do {
            try prepareHead()
        } catch {
            finish(.failure(error))
            return
        }
        hopStarted = .now()
        acquireConnection(forceNew: lifecycle.needsFreshConnection)
    }

    /// Builds the request head for the current hop.
    private func prepareHead() throws(TransferFailure) {
        let target: RequestTarget
        do throws(RequestTargetError) {
            target = try spec.target(proxies: configuration.proxy)
        } catch {
            throw .invalidURL(url: error.url, reason: error.reason)
        }
        self.target = target
        key = target.poolKey
        proxyAuthentication.hop(through: target.proxy)

        var options = RequestHeadOptions()
        options.stripsCredentials = !spec.sendsCredentials
        options.dropsDefaultAcceptEncoding = !configuration.automaticDecompression
        var proxyAuthorization: String?
        if case .forward(let proxy) = target.route {
            // The proxy reads this head: its credentials go in it, the caller's own
            // Proxy-Authorization only when none are configured.
            if let credentials = proxy.credentials {
                options.dropsProxyAuthorization = true
                if proxyAuthentication.sendsCredentials { proxyAuthorization = credentials.basicAuthorization }
            }
        } else {
            // An origin never sees a Proxy-Authorization field.
            options.dropsProxyAuthorization = true
        }
        let framing: RequestBodyFraming
        if spec.hasBody {
            framing = spec.bodyLength.map { .contentLength($0) } ?? .chunked
            if let threshold = configuration.expectContinueThreshold, spec.bodyLength.map({ $0 >= UInt64(threshold) }) ?? true,
                !spec.headers.fields.contains(.expect), !configuration.defaultFields.contains(.expect)
            {
                options.expectsContinue = true
            }
        } else if ["POST", "PUT", "PATCH", "QUERY"].contains(spec.method.rawValue) {
            framing = .contentLength(0)
        } else {
            framing = .none
        }
        expectContinue = options.expectsContinue
        do {
            try RequestHeadSerializer.serialize(
                method: spec.method.rawValue, target: target.requestTarget, authority: target.authority, fields: spec.headers.fields,
                defaults: engine.defaultHeaderLines, options: options, proxyAuthorization: proxyAuthorization, framing: framing,
                limit: configuration.maxHeaderBlockBytes,
                into: &head)
        } catch {
            switch error {
            case .invalidMethod(let method): throw .invalidRequest(reason: "invalid method \(quoted(method))")
            case .invalidTarget(let target): throw .invalidRequest(reason: "invalid request target \(quoted(target))")
            case .invalidHeader(let name): throw .invalidRequest(reason: "header \(name) contains CR, LF or NUL")
            case .tooLarge(let limit): throw .invalidRequest(reason: "request head exceeds \(limit) bytes")
            }
        }
        request = SentRequestHead(
            method: spec.method, scheme: target.scheme, authority: target.authority, path: target.originForm,
            fields: spec.headers.fields, defaults: configuration.defaultFields, options: options)
    }

    private func acquireConnection(forceNew: Bool) {
        lifecycle.waitingForSlot()
        clock.enter(.waiting, now: .now())
        guard let target else { return }
        switch pool.lease(target, forceNew: forceNew, sendsProxyCredentials: proxyAuthentication.sendsCredentials, requester: self) {
        case .reuse(let connection):
            metrics.nameLookup = nil
            metrics.connect = nil
            use(connection)
        case .building(let build):
            // Unless it ended already (a failure at once, heard above).
            if !build.ended { self.build = build }
        case .wait:
            armTimer()
        }
    }

    func poolSlotMayBeAvailable() {
        guard !finished, case .waitingForConnection = lifecycle.state else { return }
        acquireConnection(forceNew: lifecycle.needsFreshConnection)
    }

    // MARK: - Building the connection

    func connectionBuild(entered stage: ConnectionBuildStage) {
        let now = Instant.now()
        switch stage {
        case .resolving:
            lifecycle.resolving()
            clock.enter(.connecting, now: now)
        case .connecting:
            lifecycle.connecting()
        case .proxyHandshake, .handshake:
            lifecycle.handshaking()
            clock.enter(.handshaking, now: now)
        case .tunnel:
            // The CONNECT exchange counts as connecting (curl's connect timeout covers it).
            lifecycle.openingTunnel()
            clock.enter(.connecting, now: now)
        }
        armTimer()
    }

    func connectionBuild(evaluate trust: TrustFacts, completion: @escaping (Bool) -> Void) {
        evaluateTrust(trust, completion: completion)
    }

    func connectionBuild(finished result: Result<HTTPConnection, ConnectionBuildFailure>, timings: ConnectionBuildTimings) {
        build = nil
        if let nameLookup = timings.nameLookup, let connect = timings.connect {
            metrics.nameLookup = nameLookup
            metrics.connect = connect
        }
        switch result {
        case .success(let connection):
            if let handshake = timings.handshake { metrics.tlsHandshake = handshake }
            metrics.tls = timings.tls
            use(connection)
        case .failure(let failure):
            if let error = failure.configurationError {
                finish(.failure(.invalidTLSConfiguration(reason: error.reason)))
                return
            }
            if failure.atProxy, case .proxyAuthenticationRequired(let challenge) = failure.reason, case .tunnel(let proxy) = target?.route,
                proxyAuthentication.challenged(challenge, credentialsConfigured: proxy.credentials != nil, bodyReplayable: true)
            {
                // The CONNECT was refused for want of the configured credentials: asked again
                // with them, on a fresh connection.
                acquireConnection(forceNew: true)
                return
            }
            failedAtProxy = failure.atProxy
            fail(failure.reason, codes: failure.codes)
        }
    }

    /// Judges a finished handshake as the owner says: default validation here, or the owner's
    /// evaluator (app code, or a CRL check that reads files) on a thread of its own
    /// (`BlockingWork`), so a slow one holds up only this connection, never the engine's other
    /// transfers, and the handshake timeout still bounds it.
    /// `completion` runs on the loop with the verdict, unless the transfer ended meanwhile; on
    /// a refusal the transfer has already failed.
    private func evaluateTrust(_ facts: TrustFacts, completion: @escaping (Bool) -> Void) {
        switch owner.transferJudgeTrust(host: facts.host) {
        case .refuse:
            finish(.failure(.refusedByOwner))
        case .defaultValidation:
            let reasons = facts.defaultValidationFailures(validateHost: true)
            guard reasons.isEmpty else {
                fail(.certificateVerificationFailed(reasons: reasons))
                return
            }
            completion(true)
        case .evaluate(let evaluate):
            // Nothing is read meanwhile (a TLS 1.3 server's tickets wait in the socket).
            build?.pauseReading()
            // The thread holds the transfer until the verdict is in: a refused or cancelled
            // transfer is only freed then.
            let verdict = TrustVerdict(transfer: self, completion: completion)
            let loop = self.loop
            do throws(SystemResourceError) {
                try BlockingWork.run(label: "tinyfire-trust", stackBytes: BlockingWork.callbackStack) {
                    let trusted = evaluate(facts)
                    loop.execute { verdict.deliver(trusted) }
                }
            } catch {
                // No thread for the owner's evaluator: the connection is not trusted.
                finish(.failure(.resourceExhausted(error.description)))
                completion(false)
            }
        }
    }

    private func use(_ connection: HTTPConnection) {
        self.connection = connection
        lifecycle.exchangeStarted()
        hopBytesSent = 0
        hopBytesReceived = 0
        uploadPayloadSent = 0
        metrics.responseBodyBytes = 0
        metrics.decodedBodyBytes = 0
        metrics.timeToFirstByte = nil
        metrics.requestSent = nil
        metrics.reusedConnection = connection.isReused
        metrics.remoteAddress = connection.remoteAddressDescription
        clock.enter(.exchanging, now: .now())
        armTimer()
        connection.start(
            head: head, body: spec.body, bodySource: spec.bodySource, expectContinue: expectContinue,
            isHeadRequest: spec.method == .head,
            limits: ResponseParser.Limits(maxHeaderBlockBytes: configuration.maxHeaderBlockBytes),
            delegate: self)
        if paused { connection.setReadingPaused(true) }
    }

    // MARK: - Exchange events

    func exchangeDidSend(bytes: Int) {
        hopBytesSent += UInt64(bytes)
        clock.sent(bytes, now: .now())
        if spec.hasBody {
            uploadPayloadSent =
                connection?.bodyPayloadSent ?? (hopBytesSent > UInt64(head.count) ? hopBytesSent - UInt64(head.count) : 0)
            if owner.transferWantsProgress {
                owner.transferProgress(upload: (uploadPayloadSent, spec.bodyLength), download: nil, final: false)
            }
        }
    }

    func exchangeDidSendRequest() {
        lifecycle.requestSent()
        metrics.requestSent = Instant.now().since(hopStarted)
    }

    func exchangeDidReceive(bytes: Int) {
        let now = Instant.now()
        if hopBytesReceived == 0 { metrics.timeToFirstByte = now.since(hopStarted) }
        hopBytesReceived += UInt64(bytes)
        if clock.received(bytes, now: now) != nil {
            // Ahead of the receive rate: reading waits until the bytes so far are due.
            connection?.setReadingPaused(true)
            armTimer()
        }
    }

    func exchangeDidReceiveInformational(_ head: ResponseHead) {}

    // A delegate callback ends the exchange by throwing an `ExchangeAbort`: the connection
    // closes and it comes back through `exchangeDidFail`. `.drainRedirect` stops draining a
    // redirect's body (too long to keep the connection) and follows it on another;
    // `.proxyChallenge` (a proxy's 407 to a request in absolute form, with credentials
    // configured but not sent) starts the hop again with them, on a fresh connection.

    func exchangeDidReceiveHead(_ head: ResponseHead) throws(ExchangeAbort) {
        var fields = HTTPFields()
        fields.reserveCapacity(head.fields.count)
        for field in head.fields {
            if let name = Self.fieldName(field.name) { fields.append(HTTPField(name: name, value: field.value)) }
        }
        let status = HTTPResponse.Status(code: head.status, reasonPhrase: head.reason)
        response = HTTPResponse(status: status, headerFields: fields)
        if head.status == 407, case .forward(let proxy) = target?.route {
            // The proxy, not the origin, answered: credentials it asks for are sent once, on
            // the same hop; otherwise this ends the request with an error that names it.
            let challenge = head.firstValue("Proxy-Authenticate") ?? ""
            if proxyAuthentication.challenged(
                challenge, credentialsConfigured: proxy.credentials != nil, bodyReplayable: spec.bodySource?.isReplayable ?? true)
            {
                throw .proxyChallenge
            }
            failedAtProxy = true
            throw .failed(.proxyAuthenticationRequired(challenge: challenge))
        }
        let location = RedirectPolicy.redirectStatuses.contains(head.status) ? head.firstValue("Location") : nil
        let action = lifecycle.headReceived(status: head.status, location: location)
        switch action {
        case .deliverResponse:
            do throws(TransferStop) {
                try prepareFinalResponse(head)
            } catch {
                throw .failed(error.reason)
            }
        case .fail(let reason):
            throw .failed(reason)
        case .askRedirectHandler:
            redirectHead = head
            perform(action)
        default:
            perform(action)
        }
    }

    /// A response field's name as swift-http-types' type. The names servers send on nearly
    /// every response, spelled as they usually are, map to the library's constants (a compare of
    /// a short string each) instead of being validated and lowercased again; any other spelling
    /// goes through `HTTPField.Name(_:)`, which checks it is a token.
    static func fieldName(_ raw: String) -> HTTPField.Name? {
        switch raw {
        case "Content-Type": return .contentType
        case "Content-Length": return .contentLength
        case "Date": return .date
        case "Server": return .server
        case "Connection": return .connection
        case "ETag": return .eTag
        case "Last-Modified": return .lastModified
        case "Accept-Ranges": return .acceptRanges
        case "Cache-Control": return .cacheControl
        case "Location": return .location
        case "Vary": return .vary
        case "Transfer-Encoding": return .transferEncoding
        case "Content-Encoding": return .contentEncoding
        default: return HTTPField.Name(raw)
        }
    }

    /// Sets up decoding and the sink for the response that ends the transfer.
    private func prepareFinalResponse(_ head: ResponseHead) throws(TransferStop) {
        guard let response else { return }
        var expected: UInt64?
        if case .contentLength(let n) = head.framing { expected = n }
        expectedBodyLength = expected
        if configuration.automaticDecompression && spec.method != .head, head.framing != .none {
            do throws(ContentDecodingError) {
                if let coding = try ContentCoding.from(headerValues: head.listValues("Content-Encoding")) {
                    decoder = try ContentDecoder(coding: coding)
                    expected = nil
                }
            } catch {
                throw TransferStop(.contentDecodingFailed(error))
            }
        }
        if let request, owner.transferDidReceiveResponse(response, request: request) {
            // The app decides first (onHTTPResponse with a disposition): nothing more is read
            // until it answers; bytes already read reach the sink, which holds them.
            setFlowPaused(true)
        }
        do throws(SinkError) {
            sink = try owner.transferMakeSink(for: response, expectedLength: expected)
        } catch {
            throw TransferStop(error.reason)
        }
    }

    /// Asks the owner about `target`; its answer may come before this returns or later,
    /// through the loop.
    private func askRedirectHandler(about target: RequestSpec) {
        guard let response else { return }
        // The answer's route holds the transfer until it is used or the transfer ends
        // (`redirectDecided` and `finish` abandon it): an answer that never comes holds nothing.
        let loop = self.loop
        let answer = RedirectAnswer { [self] decision in
            loop.execute { self.redirectDecided(decision) }
        }
        redirectAnswer = answer
        guard owner.transferDecideRedirect(to: target, for: response, sent: request, answer: answer) else {
            // No one to ask any more: follow, as without a handler.
            redirectAnswer = nil
            perform(lifecycle.redirectDecided(RedirectRewrite(keeping: target), connectionOpen: connection != nil))
            return
        }
        if let decision = answer.close() {
            redirectDecided(decision)
        }
    }

    /// The owner answered (nil: deliver the redirect response itself).
    private func redirectDecided(_ decision: Result<RedirectRewrite?, TransferFailure>) {
        guard !finished else { return }
        redirectAnswer?.abandon()
        redirectAnswer = nil
        switch decision {
        case .failure(let failure): finish(.failure(failure))
        case .success(let rewrite): perform(lifecycle.redirectDecided(rewrite, connectionOpen: connection != nil))
        }
    }

    /// The redirect response is the final one after all: deliver it with the body kept while
    /// the handler decided, and complete when it all arrived.
    private func deliverKept(_ head: ResponseHead, complete: Bool) {
        redirectHead = nil
        let kept = keptBody
        keptBody = []
        do throws(TransferStop) {
            try prepareFinalResponse(head)
            // `withUnsafeBytes` rethrows untyped errors: the outcome comes out as a value.
            let delivered = kept.withUnsafeBytes { bytes -> Result<Void, TransferStop> in
                do throws(TransferStop) {
                    try deliverBody(bytes)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            try delivered.get()
        } catch {
            connection?.abort()
            connection = nil
            fail(error.reason)
            return
        }
        if complete { completeFinalResponse() }
    }

    func exchangeDidReceiveBody(_ bytes: UnsafeRawBufferPointer) throws(ExchangeAbort) {
        metrics.responseBodyBytes += UInt64(bytes.count)
        switch lifecycle.bodyReceived(bytes.count) {
        case .deliver:
            do throws(TransferStop) {
                try deliverBody(bytes)
            } catch {
                throw .failed(error.reason)
            }
            if owner.transferWantsProgress {
                owner.transferProgress(upload: nil, download: (metrics.responseBodyBytes, expectedBodyLength), final: false)
            }
        case .keep:
            keptBody.append(contentsOf: bytes)
        case .drop:
            break
        case .abortAndFollow:
            throw .drainRedirect
        case .fail(let reason):
            throw .failed(reason)
        }
    }

    private func deliverBody(_ bytes: UnsafeRawBufferPointer) throws(TransferStop) {
        guard let sink else { return }
        if let decoder {
            try decoder.decode(bytes, corrupt: { TransferStop(.contentDecodingFailed($0)) }) { (decoded) throws(TransferStop) in
                metrics.decodedBodyBytes += UInt64(decoded.count)
                do throws(SinkError) { try sink.write(decoded) } catch { throw TransferStop(error.reason) }
            }
        } else {
            metrics.decodedBodyBytes += UInt64(bytes.count)
            do throws(SinkError) { try sink.write(bytes) } catch { throw TransferStop(error.reason) }
        }
    }

    func exchangeDidComplete(trailers: [RawHeaderField]) {
        connection = nil
        perform(lifecycle.exchangeCompleted())
    }

    private func completeFinalResponse() {
        do throws(ContentDecodingError) {
            try decoder?.finish()
        } catch {
            fail(.contentDecodingFailed(error))
            return
        }
        do throws(SinkError) {
            try sink?.finish()
        } catch {
            fail(error.reason)
            return
        }
        if owner.transferWantsProgress {
            let upload = spec.hasBody ? (uploadPayloadSent, spec.bodyLength ?? uploadPayloadSent) : nil
            owner.transferProgress(upload: upload, download: (metrics.responseBodyBytes, expectedBodyLength), final: true)
        }
        finish(.success(()))
    }

    func exchangeDidFail(_ failure: ExchangeFailure) {
        connection = nil
        if case .delegate(.drainRedirect) = failure.kind {
            perform(lifecycle.drainAborted())
            return
        }
        if case .delegate(.proxyChallenge) = failure.kind {
            // Answered (`ProxyAuthentication` said so at the head): the hop again, with them.
            response = nil
            startHop()
            return
        }
        let reason: TransferError.Reason
        switch failure.kind {
        case .io(let code): reason = .connectionError(code: code, message: errnoMessage(code))
        case .tls(let code): reason = .tlsFailed(code: code, message: tlsErrorMessage(code))
        case .bodySource(let message): reason = .requestBodyReadFailed(message: message)
        case .parse(let error): reason = .invalidResponse(error)
        case .delegate(.failed(let failed)): reason = failed
        case .delegate(.proxyChallenge): reason = .proxyAuthenticationRequired(challenge: "")
        case .delegate(.drainRedirect): reason = .connectionError(code: 0, message: "the redirect's body was cut short")
        }
        perform(
            lifecycle.exchangeFailed(
                receivedResponseBytes: failure.receivedResponseBytes, connectionWasReused: failure.connectionWasReused,
                bodyReplayable: spec.bodySource?.isReplayable ?? true, reason: reason))
    }

    /// The next hop, after a redirect: the response, its decoder and sink belong to the last.
    private func startNextHop() {
        redirectHead = nil
        keptBody = []
        expectedBodyLength = nil
        response = nil
        decoder = nil
        sink = nil
        startHop()
    }

    // MARK: - Timeouts

    /// Arms the timer for the next deadline, unless the armed one fires no later.
    private func armTimer() {
        guard let deadline = clock.nextDeadline else { return }
        if let timer {
            if let armed = timerDeadline, armed <= deadline { return }
            loop.cancel(timer)
        }
        timerDeadline = deadline
        // The timer holds the transfer until it fires or `finish` cancels it.
        timer = loop.schedule(at: deadline) { [self] in
            timer = nil
            timerDeadline = nil
            checkTimeouts()
        }
    }

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
        clock.setPaused(suspended || flowPaused, now: .now())
        connection?.setReadingPaused(paused)
        armTimer()
    }

    private func checkTimeouts() {
        guard !finished else { return }
        switch clock.fire(now: .now()) {
        case .expired(.timedOut(let kind, let limit)):
            fail(.timedOut(kind, limit: limit))
            return
        case .expired(.lowSpeed(let bytesPerSecond, let window, let measured)):
            fail(.lowSpeed(bytesPerSecond: bytesPerSecond, window: window, measuredBytesPerSecond: measured))
            return
        case .resumeReading:
            connection?.setReadingPaused(paused)
        case .none:
            break
        }
        armTimer()
    }

    // MARK: - End

    /// Ends the transfer with `error` (cancel, engine going away).
    func cancel(with error: TransferFailure) {
        finish(.failure(error))
    }

    private func fail(_ reason: TransferError.Reason, codes: [Int32] = []) {
        var error = TransferError(
            method: spec.method.rawValue, url: spec.url.absoluteString, host: target?.host ?? key.host, phase: lifecycle.phase,
            reason: reason, bytesSent: hopBytesSent, bytesReceived: hopBytesReceived, systemCodes: codes)
        error.proxy = target?.proxy?.displayURL
        error.failedAtProxy = failedAtProxy
        finish(.failure(.failed(error)))
    }

    private func finish(_ result: Result<Void, TransferFailure>) {
        guard !finished else { return }
        lifecycle.finished()
        redirectAnswer?.abandon()
        redirectAnswer = nil
        if let timer { loop.cancel(timer) }
        timer = nil
        timerDeadline = nil
        if let opened = build?.timings, let nameLookup = opened.nameLookup, let connect = opened.connect {
            // Ended mid-build (a refused certificate, a handshake timeout): what it took so far.
            metrics.nameLookup = nameLookup
            metrics.connect = connect
        }
        build?.cancel()  // gives its slot back if the connection had not opened
        build = nil
        connection?.abort()
        connection = nil
        pool.removeWaiter(self, for: key)
        if case .failure = result { sink?.discard() }
        sink = nil
        decoder = nil
        metrics.redirects = lifecycle.redirects
        metrics.total = Instant.now().since(clock.started)
        metrics.requestBytesSent = hopBytesSent
        metrics.responseBytesReceived = hopBytesReceived
        engine.transferEnded(ownerID)
        if loop.runsOnCallerThread {
            // Ended while starting on the caller's thread (cancelled before it began, a
            // connection refused at once): the owner hears it from the loop thread, as always,
            // not inside its own call, where it may hold locks its callbacks take.
            loop.execute { [owner, request, response, metrics] in
                owner.transferDidFinish(result, request: request, response: response, report: metrics)
            }
            return
        }
        owner.transferDidFinish(result, request: request, response: response, report: metrics)
    }

    /// The evaluator's verdict on its way back to the loop.
    fileprivate func trustEvaluated(_ trusted: Bool, completion: (Bool) -> Void) {
        guard !finished else { return }
        if trusted {
            completion(true)
        } else {
            finish(.failure(.refusedByOwner))
            completion(false)
        }
    }
}

/// A loop-confined completion carried through the evaluator's thread (which never calls it).
private struct TrustVerdict: @unchecked Sendable {
    let transfer: Transfer
    let completion: (Bool) -> Void

    /// On the loop.
    func deliver(_ trusted: Bool) {
        transfer.trustEvaluated(trusted, completion: completion)
    }
}

/// Why the body cannot go on (the decoder or the sink refused), as a thrown error.
private struct TransferStop: Error {
    let reason: TransferError.Reason
    init(_ reason: TransferError.Reason) { self.reason = reason }
}
