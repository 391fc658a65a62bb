/// One HTTP/1.1 request/response exchange on a connection, as a sans-I/O state machine: it is
/// told what happened (the head is written, a 100 Continue arrived, the final head came early,
/// the response ended, a write failed) and answers what to do. `HTTPConnection` does the I/O
/// and carries the actions out; bytes, buffers and the parser stay with it.
///
/// The request and the response advance side by side (a server may answer before the body is
/// all out), so a running exchange is a pair of states:
///
///     request:  sendingHead → [waitingForContinue →] sendingBody → sent
///                         ╰──────────── cutShort (a final answer came first) ──╯
///     response: waitingForHead → receivingBody(keepAlive)
///
/// and it ends `finished(reusable:)` — reusable only when the request went out whole, the
/// response allowed it, nothing followed the response and the peer did not close — or `failed`.
package struct HTTPExchange: Sendable, Equatable {
    package init() {}

    /// Where the request is.
    package enum RequestState: Sendable, Equatable {
        /// The head is going out (an in-memory body with it when nothing has to wait).
        case sendingHead
        /// The head went out with `Expect: 100-continue`: the body waits for a 100, a final
        /// answer, or the end of the wait.
        case waitingForContinue
        /// The body is going out.
        case sendingBody
        /// Every byte of the request is out.
        case sent
        /// The server answered before the request was all out: the rest is never sent, and the
        /// connection cannot carry another exchange.
        case cutShort
    }

    /// Where the response is.
    package enum ResponseState: Sendable, Equatable {
        /// No final head yet (a 1xx may have come).
        case waitingForHead
        /// The final head arrived; its body is being read. `keepAlive`: the head allows reuse.
        case receivingBody(keepAlive: Bool)
    }

    /// The exchange's state.
    package enum State: Sendable, Equatable {
        /// Not started.
        case idle
        /// Under way.
        case running(request: RequestState, response: ResponseState)
        /// The response ended; whether the connection can carry another exchange.
        case finished(reusable: Bool)
        /// Abandoned (an I/O or protocol failure, or the owner gave up).
        case failed
    }

    /// What the connection does next.
    package enum Action: Sendable, Equatable {
        /// Nothing.
        case none
        /// Write the head (and the body after it) as the socket takes it.
        case write
        /// Stop writing: the body waits for a 100 Continue until the wait runs out.
        case holdBodyForContinue
        /// Write the body now (a 100 came, or the wait ran out).
        case writeBody
        /// The last request byte is out: release the body's source and tell the owner.
        case requestSent
        /// A final answer came while the request was still going out: stop writing, release the
        /// body's source, end the wait for 100.
        case stopSending
        /// The response ended: give the connection back to the pool, or close it.
        case complete(reusable: Bool)
        /// Writing failed with this errno: the server may have answered and closed (a 413, a
        /// 401), so what it said is read before the write error is reported.
        case readThenFail(Int32)
    }

    package private(set) var state: State = .idle
    private var hasBody = false
    private var expectsContinue = false

    /// Starts an exchange.
    /// - Parameters:
    ///   - hasBody: the request has body bytes after its head.
    ///   - expectsContinue: the head carries `Expect: 100-continue`.
    package mutating func start(hasBody: Bool, expectsContinue: Bool) -> Action {
        self.hasBody = hasBody
        self.expectsContinue = expectsContinue && hasBody
        state = .running(request: .sendingHead, response: .waitingForHead)
        return .write
    }

    /// The head's last byte is written.
    package mutating func headWritten() -> Action {
        guard case .running(.sendingHead, let response) = state else { return .none }
        if !hasBody {
            state = .running(request: .sent, response: response)
            return .requestSent
        }
        if expectsContinue {
            state = .running(request: .waitingForContinue, response: response)
            return .holdBodyForContinue
        }
        state = .running(request: .sendingBody, response: response)
        return .none
    }

    /// The body's last byte is written.
    package mutating func bodyWritten() -> Action {
        guard case .running(.sendingBody, let response) = state else { return .none }
        state = .running(request: .sent, response: response)
        return .requestSent
    }

    /// The wait for 100 Continue ran out: the body goes anyway (curl waits one second too).
    package mutating func continueWaitEnded() -> Action {
        guard case .running(.waitingForContinue, let response) = state else { return .none }
        state = .running(request: .sendingBody, response: response)
        return .writeBody
    }

    /// A 1xx response arrived.
    package mutating func informationalReceived(status: Int) -> Action {
        guard status == 100 else { return .none }
        return continueWaitEnded()
    }

    /// The final response head arrived.
    /// - Parameter keepAlive: the head allows the connection to be reused.
    package mutating func finalHeadReceived(keepAlive: Bool) -> Action {
        guard case .running(let request, .waitingForHead) = state else { return .none }
        switch request {
        case .sendingHead, .waitingForContinue, .sendingBody:
            state = .running(request: .cutShort, response: .receivingBody(keepAlive: keepAlive))
            return .stopSending
        case .sent, .cutShort:
            state = .running(request: request, response: .receivingBody(keepAlive: keepAlive))
            return .none
        }
    }

    /// The response's last byte arrived.
    /// - Parameters:
    ///   - bytesFollowed: bytes came after the response (nobody asked for them).
    ///   - peerClosed: the response ended with the connection (a close-delimited body).
    package mutating func responseEnded(bytesFollowed: Bool, peerClosed: Bool) -> Action {
        guard case .running(let request, .receivingBody(let keepAlive)) = state else { return .none }
        let reusable = keepAlive && request == .sent && !bytesFollowed && !peerClosed
        state = .finished(reusable: reusable)
        return .complete(reusable: reusable)
    }

    /// A write to the socket failed with `code`.
    package mutating func writeFailed(_ code: Int32) -> Action {
        guard case .running(let request, let response) = state, isSending(request) else { return .none }
        state = .running(request: .cutShort, response: response)
        return .readThenFail(code)
    }

    /// The exchange was abandoned.
    package mutating func fail() {
        state = .failed
    }

    /// The request is still going out (head, body, or the body waiting for 100).
    package var isSending: Bool {
        guard case .running(let request, _) = state else { return false }
        return isSending(request)
    }

    /// The request is in a state where the socket's writability matters (not while the body
    /// waits for 100).
    package var wantsToWrite: Bool {
        guard case .running(let request, _) = state else { return false }
        return request == .sendingHead || request == .sendingBody
    }

    /// The body is going out (a stream's next chunk may be written).
    package var isSendingBody: Bool {
        guard case .running(.sendingBody, _) = state else { return false }
        return true
    }

    /// The body waits for a 100 Continue.
    package var isWaitingForContinue: Bool {
        guard case .running(.waitingForContinue, _) = state else { return false }
        return true
    }

    private func isSending(_ request: RequestState) -> Bool {
        request == .sendingHead || request == .waitingForContinue || request == .sendingBody
    }
}
