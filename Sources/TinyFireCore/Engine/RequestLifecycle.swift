/// One request's life through the engine, without I/O: a state machine fed the events of its
/// connection (leased, connected, handshake done, head received, body bytes, exchange
/// complete or failed) and answering with what the I/O code must do next (lease a connection,
/// connect, start the exchange, deliver or drop body bytes, ask the redirect handler, follow a
/// redirect, retry on a fresh connection, complete, fail). `Transfer` executes the actions.
///
/// What it decides:
/// - **Redirects**, by `RedirectPolicy`; with a redirect handler, the response waits for its
///   answer: the body read meanwhile is kept (at most `redirectBodyLimit` bytes) so that a "do
///   not follow" delivers it whole. A redirect being followed has its body read and dropped
///   to keep the connection (at most `redirectBodyLimit` bytes; beyond that the connection is
///   closed instead).
/// - **Stale kept-alive connections**: an exchange on a reused connection that fails before any
///   response byte arrived is retried once on a fresh connection, when the request can be sent
///   again (idempotent method, replayable body).
/// - The **phase** a failure is reported in.
package struct RequestLifecycle: Sendable {
    /// Bytes of a redirect response's body kept or dropped before the connection is closed
    /// instead: 64 KiB.
    package static let redirectBodyLimit = 64 * 1024

    /// Where the request is.
    package enum State: Sendable {
        /// Created, not started.
        case idle
        /// Asked the pool for a connection, waiting for a slot.
        case waitingForConnection
        /// Resolving the host for a new connection.
        case resolving
        /// Opening the TCP connection.
        case connecting
        /// TLS handshake (and trust evaluation) on the new connection.
        case tlsHandshake
        /// CONNECT through the proxy.
        case openingTunnel
        /// Writing the request.
        case sending
        /// Request written, no response head yet.
        case awaitingResponse
        /// The head arrived; the body goes where `route` says.
        case receiving(BodyRoute)
        /// Succeeded, failed or was cancelled: no more events count.
        case finished
    }

    /// Where a response's body goes.
    package enum BodyRoute: Sendable {
        /// To the sink: this is the final response.
        case deliver
        /// A redirect handler has not answered yet: kept, `buffered` bytes so far;
        /// `exchangeDone` once the whole response arrived.
        case awaitingDecision(target: RequestSpec, buffered: Int, exchangeDone: Bool)
        /// A redirect being followed: read and dropped, `drained` bytes so far.
        case draining(target: RequestSpec, drained: Int)
    }

    /// What the I/O code does next.
    package enum Action: Sendable {
        /// Build the head for `spec` and lease a connection (a fresh one when
        /// `needsFreshConnection`).
        case startHop
        /// The response is final: set up decoding and the sink, tell the owner.
        case deliverResponse
        /// The response is final after a redirect handler declined: as `deliverResponse`, then
        /// hand the sink the body kept meanwhile, and complete if it all arrived.
        case deliverKeptResponse(complete: Bool)
        /// A redirect to `target`: ask the redirect handler (its answer comes back through
        /// `redirectDecided`, at once or later).
        case askRedirectHandler(target: RequestSpec)
        /// A redirect will be followed to `target`: tell the owner; with `followNow`, start the
        /// next hop at once (the exchange is over), else drop the body and follow when it ends.
        case redirect(to: RequestSpec, followNow: Bool)
        /// Start the next hop, to `spec` (the owner was told).
        case follow
        /// The whole final response arrived: finish the decoder and sink, succeed.
        case complete
        /// The exchange failed on a kept-alive connection the server had closed: lease again,
        /// not a kept-alive one; discard the sink.
        case retryOnFreshConnection
        /// Nothing to do now.
        case none
        /// Fail with the reason (the connection, if any, is aborted).
        case fail(TransferError.Reason)
    }

    /// What to do with body bytes just read.
    package enum BodyDisposition: Sendable {
        /// Decode and write to the sink.
        case deliver
        /// Keep them until the redirect handler answers.
        case keep
        /// Drop them (a redirect's body).
        case drop
        /// Stop reading: close the connection and follow the redirect (its body is too long
        /// to drain).
        case abortAndFollow
        /// Fail: a redirect body over the limit while the handler decides.
        case fail(TransferError.Reason)
    }

    package private(set) var state: State = .idle
    /// The current hop's request.
    package private(set) var spec: RequestSpec
    package let policy: RedirectPolicy
    /// Whether a redirect handler decides redirects.
    package let asksRedirectHandler: Bool
    /// URLs redirected to, in order.
    package private(set) var redirects: [String] = []
    /// Whether the one stale-connection retry was used.
    package private(set) var retriedOnStaleConnection = false
    /// The next lease must open a new connection (the retry after a stale one), until a
    /// redirect leads elsewhere.
    package private(set) var needsFreshConnection = false
    /// Body bytes go straight to the sink (the hot path: no state to look into).
    package private(set) var deliversBody = false

    package init(spec: RequestSpec, policy: RedirectPolicy, asksRedirectHandler: Bool) {
        self.spec = spec
        self.policy = policy
        self.asksRedirectHandler = asksRedirectHandler
    }

    /// The phase a failure now is reported in.
    package var phase: TransferPhase {
        switch state {
        case .idle, .resolving: return .resolving
        case .waitingForConnection: return .waitingForConnection
        case .connecting: return .connecting
        case .tlsHandshake: return .tlsHandshake
        case .openingTunnel: return .openingTunnel
        case .sending: return .sendingRequest
        case .awaitingResponse: return .awaitingResponse
        case .receiving, .finished: return .receivingBody
        }
    }

    package var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    // MARK: - Events

    /// The request starts.
    package mutating func start() -> Action {
        state = .waitingForConnection
        return .startHop
    }

    /// The pool has no slot: wait.
    package mutating func waitingForSlot() { state = .waitingForConnection }
    /// A new connection is being made: resolving first.
    package mutating func resolving() { state = .resolving }
    /// The name resolved; connecting.
    package mutating func connecting() { state = .connecting }
    /// TCP connected; the TLS handshake runs.
    package mutating func handshaking() { state = .tlsHandshake }
    package mutating func openingTunnel() { state = .openingTunnel }
    /// An exchange starts on a connection (reused or new): the request is being written.
    package mutating func exchangeStarted() { state = .sending }

    /// The last request byte went out.
    package mutating func requestSent() {
        if case .sending = state { state = .awaitingResponse }
    }

    /// A final (non-1xx) response head arrived.
    package mutating func headReceived(status: Int, location: String?) -> Action {
        switch policy.decide(status: status, location: location, request: spec, redirectsSoFar: redirects.count) {
        case .deliver:
            state = .receiving(.deliver)
            deliversBody = true
            return .deliverResponse
        case .fail(let reason):
            state = .receiving(.deliver)
            return .fail(reason)
        case .follow(let target):
            if asksRedirectHandler {
                state = .receiving(.awaitingDecision(target: target, buffered: 0, exchangeDone: false))
                return .askRedirectHandler(target: target)
            }
            state = .receiving(.draining(target: target, drained: 0))
            return .redirect(to: target, followNow: false)
        }
    }

    /// The redirect handler answered: `rewritten` is the request to follow, nil to deliver the
    /// redirect response as the final one. `connectionOpen`: the exchange still runs.
    package mutating func redirectDecided(_ rewritten: RedirectRewrite?, connectionOpen: Bool) -> Action {
        guard case .receiving(.awaitingDecision(let target, let buffered, let exchangeDone)) = state else { return .none }
        guard let rewritten else {
            state = .receiving(.deliver)
            deliversBody = true
            return .deliverKeptResponse(complete: exchangeDone)
        }
        let next = RedirectPolicy.apply(rewritten, to: target)
        if exchangeDone || !connectionOpen {
            _ = follow(next)
            return .redirect(to: next, followNow: true)
        }
        state = .receiving(.draining(target: next, drained: buffered))
        return .redirect(to: next, followNow: false)
    }

    /// Body bytes arrived (`count` of them): where they go.
    package mutating func bodyReceived(_ count: Int) -> BodyDisposition {
        if deliversBody { return .deliver }
        guard case .receiving(let route) = state else { return .deliver }
        switch route {
        case .deliver:
            return .deliver
        case .awaitingDecision(let target, let buffered, let done):
            guard buffered + count <= Self.redirectBodyLimit else {
                return .fail(.redirectBodyTooLarge(limit: Self.redirectBodyLimit))
            }
            state = .receiving(.awaitingDecision(target: target, buffered: buffered + count, exchangeDone: done))
            return .keep
        case .draining(let target, let drained):
            let total = drained + count
            state = .receiving(.draining(target: target, drained: total))
            return total > Self.redirectBodyLimit ? .abortAndFollow : .drop
        }
    }

    /// The response ended (the connection is released or closed by then).
    package mutating func exchangeCompleted() -> Action {
        guard case .receiving(let route) = state else { return .none }
        switch route {
        case .deliver:
            return .complete
        case .awaitingDecision(let target, let buffered, _):
            state = .receiving(.awaitingDecision(target: target, buffered: buffered, exchangeDone: true))
            return .none
        case .draining(let target, _):
            return follow(target)
        }
    }

    /// The drain was cut short on purpose (`abortAndFollow`): follow on another connection.
    package mutating func drainAborted() -> Action {
        guard case .receiving(.draining(let target, _)) = state else { return .none }
        return follow(target)
    }

    /// The exchange failed before the response was complete.
    /// - Parameters:
    ///   - receivedResponseBytes: any response byte arrived.
    ///   - connectionWasReused: the connection had carried an earlier exchange.
    ///   - bodyReplayable: the request body can be sent again.
    ///   - reason: the failure, should it not be retried.
    package mutating func exchangeFailed(
        receivedResponseBytes: Bool, connectionWasReused: Bool, bodyReplayable: Bool, reason: TransferError.Reason
    ) -> Action {
        if !receivedResponseBytes && connectionWasReused && spec.method.isIdempotent && !retriedOnStaleConnection
            && bodyReplayable
        {
            retriedOnStaleConnection = true
            needsFreshConnection = true
            state = .waitingForConnection
            return .retryOnFreshConnection
        }
        return .fail(reason)
    }

    /// The transfer ended (success, failure or cancel).
    package mutating func finished() {
        state = .finished
        deliversBody = false
    }

    private mutating func follow(_ target: RequestSpec) -> Action {
        redirects.append(target.url.absoluteString)
        spec = target
        needsFreshConnection = false
        deliversBody = false
        state = .waitingForConnection
        return .follow
    }
}
