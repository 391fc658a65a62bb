/// The stages a connection goes through while it is built, in order (each may be skipped).
package enum ConnectionBuildStage: Sendable, Equatable {
    /// Looking up the origin's name, or the proxy's.
    case resolving
    /// Opening TCP (Happy Eyeballs over the addresses).
    case connecting
    /// TLS to an https proxy.
    case proxyHandshake
    /// CONNECT through the proxy.
    case tunnel
    /// TLS to the origin (over the socket or inside the tunnel).
    case handshake
}

/// Why a connection could not be built.
package struct ConnectionBuildFailure: Error {
    package var reason: TransferError.Reason
    /// getaddrinfo's status or each address's errno (see `TransferError.systemCodes`).
    package var codes: [Int32] = []
    /// The failure was on the way to the proxy or at it.
    package var atProxy = false
    /// The TLS settings could not be loaded (a CA file that does not parse): the request fails
    /// with this error rather than a transfer error.
    package var configurationError: TLSSetupError?

    package init(
        reason: TransferError.Reason, codes: [Int32] = [], atProxy: Bool = false, configurationError: TLSSetupError? = nil
    ) {
        self.reason = reason
        self.codes = codes
        self.atProxy = atProxy
        self.configurationError = configurationError
    }
}

/// What building a connection takes from the client's configuration.
package struct ConnectionSettings: Sendable {
    /// The connection's read buffer, allocated when it opens.
    package var readBufferSize: Int
    /// The origin's TLS settings (trust anchors, CRLs, versions, resumption).
    package var tls: TLSConfiguration
    /// The largest response head a proxy's CONNECT answer may have.
    package var maxHeaderBlockBytes: Int
    /// The `User-Agent` CONNECT requests carry (the client's default, as curl sends its own).
    package var userAgent: String?

    package init(readBufferSize: Int, tls: TLSConfiguration, maxHeaderBlockBytes: Int, userAgent: String?) {
        self.readBufferSize = readBufferSize
        self.tls = tls
        self.maxHeaderBlockBytes = maxHeaderBlockBytes
        self.userAgent = userAgent
    }
}

/// Hears how a build goes (the pool's `PooledBuild`, for the transfer it is for). Called on the loop.
package protocol ConnectionBuildDelegate: AnyObject {
    /// The build entered `stage` (the transfer's phase and clock follow it).
    func connectionBuild(entered stage: ConnectionBuildStage)
    /// A TCP connection opened: it takes the reserved pool slot; the rest of the build runs on it.
    func connectionBuild(opened connection: HTTPConnection, nameLookup: Duration, connect: Duration)
    /// The origin's handshake finished: judge `trust`, then call `completion(true)` to go on.
    /// On a refusal the delegate fails the transfer itself and calls `completion(false)`.
    func connectionBuild(evaluate trust: TrustFacts, completion: @escaping (Bool) -> Void)
    /// The connection is ready for exchanges (with the origin's TLS facts, if any), or failed.
    func connectionBuild(
        finished result: Result<HTTPConnection, ConnectionBuildFailure>, tls: TLSStreamDetails?, handshake: Duration?)
}

/// Builds connections for the pool, step by step, as a stack of byte streams:
/// resolve → TCP connect (Happy Eyeballs) → TLS to the proxy (https proxies) → CONNECT
/// (tunnels) → TLS to the origin (https) → trust. Each TLS layer runs over the stream below it,
/// so the exchange above reads and writes one stream whatever the route.
///
/// Holds what builds share: the origin's TLS context (loaded on the first https request), one
/// context per https proxy trust setting, and the last TLS session per pool key.
///
/// Memory: one TLS context per distinct trust setting (the session's, and each https proxy's),
/// one saved session per pool key (bounded by the origins the session talks to). Loop-confined.
package final class ConnectionFactory {
    package let loop: EventLoop
    package let settings: ConnectionSettings
    private var originContextResult: Result<TLSContext, TLSSetupError>?
    private var proxyContexts: [(TLSConfiguration, Result<TLSContext, TLSSetupError>)] = []
    private var tlsSessions: [PoolKey: TLSSession<TrustFacts>] = [:]

    package init(loop: EventLoop, settings: ConnectionSettings) {
        self.loop = loop
        self.settings = settings
    }

    /// Starts building a connection for `target` under `key`, on a pool slot already reserved.
    package func build(_ target: RequestTarget, key: PoolKey, sendsProxyCredentials: Bool, delegate: ConnectionBuildDelegate)
        -> ConnectionBuild
    {
        let build = ConnectionBuild(
            factory: self, target: target, key: key, sendsProxyCredentials: sendsProxyCredentials, delegate: delegate)
        build.start()
        return build
    }

    /// The origin's TLS context (the settings' `tls`), loaded once.
    package func originContext() throws(TLSSetupError) -> TLSContext {
        if let originContextResult { return try originContextResult.get() }
        let result: Result<TLSContext, TLSSetupError>
        do throws(TLSSetupError) {
            result = .success(try TLSContext(settings.tls))
        } catch {
            result = .failure(error)
        }
        originContextResult = result
        return try result.get()
    }

    /// The TLS context for an https proxy's own certificate, loaded once per trust setting.
    package func proxyContext(_ tls: TLSConfiguration) throws(TLSSetupError) -> TLSContext {
        if let entry = proxyContexts.first(where: { $0.0 == tls }) { return try entry.1.get() }
        let result: Result<TLSContext, TLSSetupError>
        do throws(TLSSetupError) {
            result = .success(try TLSContext(tls))
        } catch {
            result = .failure(error)
        }
        proxyContexts.append((tls, result))
        return try result.get()
    }

    package func tlsSession(for key: PoolKey) -> TLSSession<TrustFacts>? {
        settings.tls.sessionResumption ? tlsSessions[key] : nil
    }

    package func storeTLSSession(_ session: TLSSession<TrustFacts>, for key: PoolKey) {
        guard settings.tls.sessionResumption else { return }
        tlsSessions[key] = session
    }
}

/// One connection being built. Ends with exactly one `finished` call to its delegate, unless
/// cancelled first. Loop-confined.
package final class ConnectionBuild {
    private let factory: ConnectionFactory
    private let target: RequestTarget
    private let key: PoolKey
    private let sendsProxyCredentials: Bool
    /// Cleared when the build ends, which breaks the cycle with the transfer.
    private var delegate: ConnectionBuildDelegate?
    private var connector: Connector?
    private var connection: HTTPConnection?
    /// How the lookup's answer, which may come long after a cancel, reaches the build; cleared
    /// when the build ends.
    private var answerTarget: ClearableReference<ConnectionBuild>?
    private var resolveStarted = Instant.now()
    private var nameLookup: Duration = .zero

    fileprivate init(
        factory: ConnectionFactory, target: RequestTarget, key: PoolKey, sendsProxyCredentials: Bool,
        delegate: ConnectionBuildDelegate
    ) {
        self.factory = factory
        self.target = target
        self.key = key
        self.sendsProxyCredentials = sendsProxyCredentials
        self.delegate = delegate
    }

    private var viaProxy: Bool { target.proxy != nil }

    /// Abandons the build: the connection, if one opened, is closed; the delegate hears nothing.
    package func cancel() {
        delegate = nil
        answerTarget?.value = nil
        answerTarget = nil
        connector?.cancel()
        connector = nil
        connection?.abort()
        connection = nil
    }

    fileprivate func start() {
        delegate?.connectionBuild(entered: .resolving)
        resolveStarted = .now()
        // getaddrinfo cannot be interrupted and may answer long after the build was cancelled:
        // the answer reaches the build through a box that a cancel empties, and only the loop
        // waits for it.
        let answerTarget = ClearableReference(self)
        self.answerTarget = answerTarget
        let loop = factory.loop
        DNSResolver.resolve(host: target.connectHost, port: target.connectPort) { result in
            loop.execute { answerTarget.value?.resolved(result) }
        }
    }

    private func resolved(_ result: Result<[SocketAddress], DNSResolver.ResolutionError>) {
        answerTarget = nil
        guard delegate != nil else { return }
        nameLookup = Instant.now().since(resolveStarted)
        switch result {
        case .failure(let error):
            fail(ConnectionBuildFailure(reason: .nameResolutionFailed(message: error.message), codes: [error.status], atProxy: viaProxy))
        case .success(let addresses):
            guard !addresses.isEmpty else {
                fail(ConnectionBuildFailure(reason: .nameResolutionFailed(message: "no IPv4 or IPv6 address"), atProxy: viaProxy))
                return
            }
            connect(to: addresses)
        }
    }

    private func connect(to addresses: [SocketAddress]) {
        delegate?.connectionBuild(entered: .connecting)
        let started = Instant.now()
        let connector = Connector(loop: factory.loop, addresses: addresses)
        self.connector = connector
        connector.start { [self] result in
            self.connector = nil
            switch result {
            case .failure(let failure):
                fail(ConnectionBuildFailure(reason: .connectFailed(attempts: failure.attempts), codes: failure.codes, atProxy: viaProxy))
            case .success(let connected):
                let connection: HTTPConnection
                do throws(SystemResourceError) {
                    connection = try HTTPConnection(
                        key: key, fd: connected.fd, remoteAddress: connected.address, loop: factory.loop,
                        readBufferSize: factory.settings.readBufferSize)
                } catch {
                    fail(ConnectionBuildFailure(reason: .connectionError(code: 0, message: error.description), atProxy: viaProxy))
                    return
                }
                self.connection = connection
                delegate?.connectionBuild(opened: connection, nameLookup: nameLookup, connect: Instant.now().since(started))
                guard delegate != nil else { return }
                proxyHandshake(on: connection)
            }
        }
    }

    /// TLS to an https proxy, checked against the proxy's own trust (default validation: its
    /// CA setting and its host name).
    private func proxyHandshake(on connection: HTTPConnection) {
        guard let proxy = target.proxy, proxy.scheme == .https else {
            tunnel(on: connection)
            return
        }
        delegate?.connectionBuild(entered: .proxyHandshake)
        let tls: TLSStream
        do throws(TLSSetupError) {
            let isAddress = IPAddressBytes.parse(proxy.host) != nil
            tls = try TLSStream(
                context: try factory.proxyContext(proxy.tls), over: connection.stream, serverName: isAddress ? nil : proxy.host)
        } catch {
            fail(ConnectionBuildFailure(reason: .tlsFailed(code: 0, message: error.reason), atProxy: true, configurationError: error))
            return
        }
        connection.run(TLSHandshakeStep(tls)) { [self] progress in
            guard case .done = progress else {
                if case .failed(let reason) = progress { fail(ConnectionBuildFailure(reason: reason, atProxy: true)) }
                return
            }
            let trust = TrustFacts(stream: tls, details: tls.details, host: proxy.host)
            let reasons = trust.defaultValidationFailures(validateHost: true)
            guard reasons.isEmpty else {
                fail(ConnectionBuildFailure(reason: .certificateVerificationFailed(reasons: reasons), atProxy: true))
                return
            }
            connection.push(tls)
            tunnel(on: connection)
        }
    }

    /// CONNECT to the origin through the proxy.
    private func tunnel(on connection: HTTPConnection) {
        guard case .tunnel(let proxy) = target.route else {
            originHandshake(on: connection)
            return
        }
        delegate?.connectionBuild(entered: .tunnel)
        let credentials = sendsProxyCredentials ? proxy.credentials : nil
        let step = ProxyTunnelStep(
            stream: connection.stream, authority: target.tunnelAuthority, authorization: credentials?.basicAuthorization,
            userAgent: factory.settings.userAgent, maxHeadBytes: factory.settings.maxHeaderBlockBytes)
        connection.run(step) { [self] progress in
            switch progress {
            case .done:
                originHandshake(on: connection)
            case .failed(let reason):
                // A 407 is the transfer's to answer (`ProxyAuthentication`).
                fail(ConnectionBuildFailure(reason: reason, atProxy: true))
            case .wantRead, .wantWrite:
                break
            }
        }
    }

    /// TLS to the origin over whatever is below (the socket, or the tunnel), then the trust
    /// decision, which the delegate makes (its evaluators, pins and revocation).
    private func originHandshake(on connection: HTTPConnection) {
        guard target.isTLS else {
            succeed(connection, tls: nil, handshake: nil)
            return
        }
        delegate?.connectionBuild(entered: .handshake)
        let tls: TLSStream
        do throws(TLSSetupError) {
            let isAddress = IPAddressBytes.parse(target.host) != nil
            tls = try TLSStream(
                context: try factory.originContext(), over: connection.stream, serverName: isAddress ? nil : target.host)
        } catch {
            fail(ConnectionBuildFailure(reason: .tlsFailed(code: 0, message: error.reason), configurationError: error))
            return
        }
        let offered = factory.tlsSession(for: key)
        if let offered { tls.offer(offered) }
        let started = Instant.now()
        connection.run(TLSHandshakeStep(tls)) { [self] progress in
            guard case .done = progress else {
                if case .failed(let reason) = progress { fail(ConnectionBuildFailure(reason: reason)) }
                return
            }
            let handshake = Instant.now().since(started)
            var details = tls.details
            // A resumed handshake received no certificate: it is judged on what the full
            // handshake it continues presented and verified, by the same evaluators.
            let trust: TrustFacts
            if details.resumed, let offered {
                trust = offered.trust
                details.peerCertificates = trust.presented
                details.verifiedPath = trust.verifiedPath
            } else {
                trust = TrustFacts(stream: tls, details: details, host: target.host)
            }
            connection.push(tls)
            delegate?.connectionBuild(evaluate: trust) { [self] trusted in
                guard trusted else {
                    cancel()
                    return
                }
                if !details.resumed, let session = TLSSession(trust: trust), tls.saveSession(into: session) {
                    factory.storeTLSSession(session, for: key)
                }
                succeed(connection, tls: details, handshake: handshake)
            }
        }
    }

    private func succeed(_ connection: HTTPConnection, tls: TLSStreamDetails?, handshake: Duration?) {
        let delegate = self.delegate
        self.delegate = nil
        self.connection = nil
        delegate?.connectionBuild(finished: .success(connection), tls: tls, handshake: handshake)
    }

    private func fail(_ failure: ConnectionBuildFailure) {
        let delegate = self.delegate
        self.delegate = nil
        connection?.abort()
        connection = nil
        connector?.cancel()
        connector = nil
        delegate?.connectionBuild(finished: .failure(failure), tls: nil, handshake: nil)
    }
}
