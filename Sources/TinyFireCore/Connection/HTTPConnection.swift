import CTinyFireSystem

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Receives what happens to one request/response exchange on a connection. Called on the
/// loop thread. A throwing callback aborts the exchange (the connection is closed) and comes
/// back as `exchangeDidFail` with `.delegate(abort)`.
package protocol HTTPExchangeDelegate: AnyObject {
    func exchangeDidSend(bytes: Int)
    /// The last byte of the request went out.
    func exchangeDidSendRequest()
    func exchangeDidReceive(bytes: Int)
    func exchangeDidReceiveInformational(_ head: ResponseHead)
    func exchangeDidReceiveHead(_ head: ResponseHead) throws(ExchangeAbort)
    func exchangeDidReceiveBody(_ bytes: UnsafeRawBufferPointer) throws(ExchangeAbort)
    func exchangeDidComplete(trailers: [RawHeaderField])
    func exchangeDidFail(_ failure: ExchangeFailure)
}

/// Why an exchange's delegate stopped it.
package enum ExchangeAbort: Error, Sendable {
    /// The rest of a redirect's body is not worth reading: close the connection and follow.
    case drainRedirect
    /// The proxy asked for credentials that are configured: they go on a fresh connection.
    case proxyChallenge
    /// The response cannot be taken (its sink is full or failed, its gzip is corrupt, …).
    case failed(TransferError.Reason)
}

/// Why an exchange ended without a complete response.
package struct ExchangeFailure: Error {
    package enum Kind {
        /// A system call failed (errno); the transfer knows the phase.
        case io(Int32)
        /// A TLS record failed (mbedTLS code).
        case tls(Int32)
        /// The request body's source failed (the upload file could not be read).
        case bodySource(String)
        /// The response violated HTTP/1.1, or the connection closed early.
        case parse(HTTPParseError)
        /// The delegate stopped it.
        case delegate(ExchangeAbort)
    }

    package var kind: Kind
    /// Whether any byte of the response arrived before the failure.
    package var receivedResponseBytes: Bool
    /// Whether the connection had carried an earlier exchange (a candidate stale connection).
    package var connectionWasReused: Bool
}

/// One HTTP/1.1 connection over a non-blocking socket: writes a request head and body, feeds
/// what it reads to a `ResponseParser`, and hands events to the exchange's delegate. Carries
/// one exchange at a time (no pipelining). Loop-confined.
///
/// Memory: one read buffer of `readBufferSize` bytes, allocated when the connection opens,
/// plus the parser's head buffer (bounded by the header block limit).
package final class HTTPConnection: EventLoopHandler {
    package enum State {
        case idle(since: Instant)
        case active
        case closed
    }

    package let key: PoolKey
    package let fd: Int32
    package let remoteAddress: SocketAddress
    /// `remoteAddress` as text, computed once (getnameinfo is not free).
    package let remoteAddressDescription: String
    private let loop: EventLoop
    private var registration: Registration?
    private let readBuffer: UnsafeMutableRawBufferPointer
    package private(set) var state: State = .active
    /// Completed exchanges; > 0 means the next one runs on a reused connection.
    package private(set) var completedExchanges = 0
    /// The pool the connection goes back to after an exchange; a strong reference, cleared when
    /// the connection closes (which breaks the cycle with the pool's table).
    package var pool: ConnectionPool?

    // The current exchange.
    private var delegate: HTTPExchangeDelegate?
    private var parser = ResponseParser(isHeadRequest: false)
    private var outHead: [UInt8] = []
    private var outBody: (any BodyBytes)?
    /// A body from files or a stream instead of `outBody`.
    private var producer: BodyProducer?
    /// How a stream producer reaches the connection when a chunk is ready; cleared when the
    /// body ends, so a late wake-up finds nothing.
    private var producerTarget: ClearableReference<HTTPConnection>?
    private var bodyLength = 0
    /// The exchange's state: what is sent, what has arrived, what to do next.
    private var exchange = HTTPExchange()
    /// An in-memory body goes out in the same write as the head (nothing waits for a 100).
    private var bodyWithHead = false
    /// Ends the wait for 100 Continue.
    private var continueTimer: TimerHandle?
    /// Bytes of the head and body written so far.
    private var written = 0
    private var watchingWrite = false
    /// Reading is paused (a suspended request): no read interest, no reads.
    private var readingPaused = false
    /// The top of the connection's layers (the socket, TLS over it, …): every byte of the
    /// exchange goes through it.
    package private(set) var stream: any ByteStream
    /// The step running before exchanges can (a TLS handshake, a CONNECT), and who hears how
    /// it ended.
    private var step: ConnectionStep?
    private var stepCompletion: ((ConnectionStepProgress) -> Void)?
    /// A read continuation is scheduled (TLS data already decrypted inside mbedTLS).
    private var readScheduled = false
    /// The peer reset the connection before its first exchange started.
    private var brokenBeforeExchange = false

    package init(
        key: PoolKey, fd: Int32, remoteAddress: SocketAddress, loop: EventLoop, readBufferSize: Int
    ) throws(SystemResourceError) {
        self.key = key
        self.fd = fd
        self.remoteAddress = remoteAddress
        self.remoteAddressDescription = remoteAddress.description
        self.stream = SocketStream(fd: fd)
        self.loop = loop
        self.readBuffer = .allocate(byteCount: readBufferSize, alignment: 16)
        do {
            registration = try loop.register(fd, interest: .read, handler: self)
        } catch {
            // Fully initialized, so deinit still runs: it frees the buffer; close the fd here.
            closeDescriptor(fd)
            state = .closed
            throw error
        }
    }

    deinit {
        // Normally closed through close(); a connection dropped with its loop still owns its fd.
        if case .closed = state {} else { closeDescriptor(fd) }
        readBuffer.deallocate()
    }

    package var isReused: Bool { completedExchanges > 0 }

    /// Exchanges one connection carries at once: HTTP/1.1 without pipelining runs one request
    /// after the other. (The pool's only knowledge of it; a multiplexed protocol's connection
    /// would say its stream limit.)
    package static let maxConcurrentExchanges = 1

    /// How long a request with `Expect: 100-continue` waits before sending its body anyway
    /// (curl waits one second too).
    package static let expectContinueWait: Duration = .seconds(1)

    /// Starts an exchange: writes `head` and the body (from memory, or from `bodySource`:
    /// files through sendfile or a fixed 64 KiB buffer, a stream in 64 KiB chunks), then reads
    /// the response.
    package func start(
        head: [UInt8], body: (any BodyBytes)?, bodySource: RequestBodySource? = nil, expectContinue: Bool = false, isHeadRequest: Bool,
        limits: ResponseParser.Limits, delegate: HTTPExchangeDelegate
    ) {
        state = .active
        self.delegate = delegate
        parser = ResponseParser(isHeadRequest: isHeadRequest, limits: limits)
        outHead = head
        outBody = body
        bodyLength = body?.count ?? 0
        producer = nil
        written = 0
        switch bodySource {
        case .none:
            break
        case .segments(let segments):
            producer = SegmentBodyProducer(segments: segments)
        case .stream(let source):
            guard source.claim() else {
                fail(.bodySource("the upload stream was already read by an earlier attempt and cannot be sent again"))
                return
            }
            let target = ClearableReference(self)
            producerTarget = target
            producer = StreamBodyProducer(stream: source.stream, loop: loop) { target.value?.bodyBecameReady() }
        }
        if readingPaused {
            // The last exchange ended paused (its owner held the body back): read again, or
            // this response would never be seen.
            readingPaused = false
            updateInterest()
        }
        bodyWithHead = !expectContinue && producer == nil
        perform(exchange.start(hasBody: producer != nil || bodyLength > 0, expectsContinue: expectContinue))
        if brokenBeforeExchange {
            fail(.io(ECONNRESET))
            return
        }
        writeRequest()
    }

    /// Abandons the current exchange and closes the connection, without calling the delegate.
    package func abort() {
        delegate = nil
        close()
    }

    /// Puts the connection in the idle state (the pool calls this).
    package func markIdle(now: Instant) {
        state = .idle(since: now)
    }

    /// Puts a layer on top of the stream (TLS over what is there); from now on every byte
    /// goes through it.
    package func push(_ layer: any ByteStream) {
        stream = layer
    }

    /// Runs a step (a TLS handshake, a CONNECT) on this connection, then calls `completion`
    /// once, on the loop, with `.done` or `.failed`.
    package func run(_ step: ConnectionStep, completion: @escaping (ConnectionStepProgress) -> Void) {
        self.step = step
        stepCompletion = completion
        continueStep()
    }

    private func continueStep() {
        guard let step, let completion = stepCompletion else { return }
        let progress = step.advance()
        switch progress {
        case .wantRead:
            setWatchingWrite(false)
        case .wantWrite:
            setWatchingWrite(true)
        case .done, .failed:
            self.step = nil
            stepCompletion = nil
            setWatchingWrite(false)
            completion(progress)
        }
    }

    package func close() {
        if case .closed = state { return }
        if case .idle = state { stream.shutdown() }
        state = .closed
        if let continueTimer { loop.cancel(continueTimer) }
        continueTimer = nil
        endBody()
        if let registration {
            loop.deregister(registration)
            self.registration = nil
        }
        closeDescriptor(fd)
        delegate = nil
        outBody = nil
        let pool = self.pool
        self.pool = nil
        pool?.connectionClosed(self)
    }

    // MARK: - Events

    package func handleEvents(_ events: UInt32) {
        switch state {
        case .closed:
            return
        case .idle:
            // An idle connection that becomes readable was closed by the server (or it sent
            // bytes nobody asked for): either way it cannot be reused.
            close()
        case .active:
            if step != nil {
                continueStep()
                return
            }
            if delegate == nil {
                // Between the handshake and the first exchange (while the trust decision runs):
                // nothing is read. A reset, which epoll reports whatever the interest, is kept
                // for the exchange instead of firing again and again.
                if events & (EpollBits.hangup | EpollBits.error) != 0, let registration {
                    loop.deregister(registration)
                    self.registration = nil
                    brokenBeforeExchange = true
                }
                return
            }
            if exchange.wantsToWrite && events & EpollBits.writable != 0 {
                writeRequest()
            }
            guard case .active = state, delegate != nil else { return }
            // Paused reading still handles a hang-up: epoll reports it whatever the interest,
            // and ignoring it would spin the loop.
            if readingPaused && events & (EpollBits.hangup | EpollBits.error) != 0 {
                readingPaused = false
                updateInterest()
            }
            if !readingPaused && events & (EpollBits.readable | EpollBits.hangup | EpollBits.error) != 0 {
                readResponse()
            }
        }
    }

    private func writeRequest() {
        while exchange.wantsToWrite {
            let headCount = outHead.count
            if written < headCount {
                // The head, with an in-memory body in the same sendmsg when nothing has to wait
                // (a TLS layer writes the head alone).
                let result = writeHead(withBody: bodyWithHead ? outBody : nil)
                guard handle(result) else { return }
            } else if let producer {
                switch producer.write(to: stream) {
                case .wrote(let n):
                    guard handle(.bytes(n)) else { return }
                case .wouldBlock:
                    guard handle(.wouldBlock) else { return }
                case .waiting:
                    setWatchingWrite(false)
                    return
                case .done:
                    perform(exchange.bodyWritten())
                case .failed(let code):
                    guard handle(.failed(code)) else { return }
                case .sourceFailed(let message):
                    exchange.fail()
                    setWatchingWrite(false)
                    fail(.bodySource(message))
                    return
                }
            } else {
                guard let outBody else { return }
                guard handle(outBody.write(from: written - headCount, to: stream)) else { return }
            }
        }
    }

    /// Writes the rest of the head, and `body` after it in the same gather write.
    private func writeHead(withBody body: (any BodyBytes)?) -> IOResult {
        outHead.withUnsafeBytes { headBytes in
            let first = UnsafeRawBufferPointer(rebasing: headBytes[written...])
            guard let body else { return stream.write(first) }
            var result = IOResult.bytes(0)
            body.withBodyBytes { result = stream.write(first, $0) }
            return result
        }
    }

    /// Accounts for one write; false when writing must stop for now (blocked or failed).
    private func handle(_ result: IOResult) -> Bool {
        switch result {
        case .bytes(let n):
            written += n
            delegate?.exchangeDidSend(bytes: n)
            if written >= outHead.count && written - n < outHead.count { perform(exchange.headWritten()) }
            if producer == nil && written == outHead.count + bodyLength { perform(exchange.bodyWritten()) }
            return true
        case .wouldBlock:
            setWatchingWrite(true)
            return false
        case .endOfFile:
            return false
        case .failed(let code) where stream.failuresAreTLSCodes:
            exchange.fail()
            setWatchingWrite(false)
            fail(.tls(code))
            return false
        case .failed(let code):
            perform(exchange.writeFailed(code))
            return false
        }
    }

    /// Carries out what the exchange decided.
    private func perform(_ action: HTTPExchange.Action) {
        switch action {
        case .none, .write, .complete:
            // .write: the caller writes; .complete is carried out by `complete`.
            break
        case .holdBodyForContinue:
            setWatchingWrite(false)
            // The timer holds the connection until it fires or close() cancels it.
            continueTimer = loop.schedule(at: .now() + Self.expectContinueWait) { [self] in
                continueTimer = nil
                resumeBody(exchange.continueWaitEnded())
            }
        case .writeBody:
            cancelContinueTimer()
        case .requestSent:
            outBody = nil
            endBody()
            setWatchingWrite(false)
            delegate?.exchangeDidSendRequest()
        case .stopSending:
            // An early final response (413, 401…) ends the upload; the connection cannot be
            // reused since the body was cut short.
            outHead = []
            outBody = nil
            endBody()
            cancelContinueTimer()
            setWatchingWrite(false)
        case .readThenFail(let code):
            setWatchingWrite(false)
            readResponse(writeError: code)
        }
    }

    private func cancelContinueTimer() {
        if let continueTimer { loop.cancel(continueTimer) }
        continueTimer = nil
    }

    /// A 100 Continue arrived, or the wait ran out: the body goes out.
    private func resumeBody(_ action: HTTPExchange.Action) {
        guard action == .writeBody else { return }
        perform(action)
        guard case .active = state else { return }
        writeRequest()
    }

    /// Releases the body's producer (its files and buffers).
    private func endBody() {
        producer?.close()
        producer = nil
        producerTarget?.value = nil
        producerTarget = nil
    }

    /// Body bytes sent so far on this exchange, without chunk framing.
    package var bodyPayloadSent: UInt64? { producer?.payloadSent }

    /// A stream's next chunk is ready.
    private func bodyBecameReady() {
        guard case .active = state, exchange.wantsToWrite else { return }
        writeRequest()
    }

    private func setWatchingWrite(_ on: Bool) {
        guard watchingWrite != on else { return }
        watchingWrite = on
        updateInterest()
    }

    /// Stops or restarts reading the response (the kernel's receive buffer then fills and TCP
    /// flow control holds the server back). Takes effect after the buffer being processed.
    package func setReadingPaused(_ paused: Bool) {
        guard readingPaused != paused else { return }
        readingPaused = paused
        // Data that arrived while paused is reported again once the interest is back
        // (level-triggered epoll).
        updateInterest()
    }

    private func updateInterest() {
        guard let registration else { return }
        var interest: Interest = readingPaused ? [] : .read
        if watchingWrite { interest.insert(.write) }
        loop.reregister(registration, interest: interest)
    }

    private func readResponse(writeError: Int32? = nil) {
        // Several reads per wakeup while the socket keeps filling the buffer; a short read
        // means it is drained, which saves the EAGAIN round trip.
        // TLS hands out at most one record per read and may hold decrypted bytes the socket
        // no longer signals, so it reads until mbedTLS would block.
        let buffered = stream.holdsBufferedInput
        let rounds = buffered ? 64 : 8
        for _ in 0..<rounds {
            guard case .active = state, delegate != nil, !readingPaused else { return }
            let result = stream.read(into: readBuffer)
            switch result {
            case .bytes(let n):
                delegate?.exchangeDidReceive(bytes: n)
                process(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
                if !buffered && n < readBuffer.count { return }
            case .wouldBlock:
                if let writeError { fail(.io(writeError)) }
                return
            case .endOfFile:
                if let writeError, !parser.hasReceivedBytes {
                    fail(.io(writeError))
                    return
                }
                endOfInput()
                return
            case .failed(let code):
                fail(stream.failuresAreTLSCodes ? .tls(code) : .io(code))
                return
            }
        }
        // Out of rounds with data still inside mbedTLS: continue after other work.
        if buffered, !readScheduled {
            readScheduled = true
            // Holds the connection until it runs (at once, after the loop's other work).
            _ = loop.schedule(at: .now()) { [self] in
                readScheduled = false
                readResponse()
            }
        }
    }

    private func process(_ input: UnsafeRawBufferPointer) {
        var offset = 0
        while let delegate {
            let event: ResponseParser.Event
            let consumed: Int
            do throws(HTTPParseError) {
                (consumed, event) = try parser.parse(UnsafeRawBufferPointer(rebasing: input[offset...]))
            } catch {
                fail(.parse(error))
                return
            }
            let base = offset
            offset += consumed
            do throws(ExchangeAbort) {
                switch event {
                case .needMore:
                    return
                case .informational(let head):
                    delegate.exchangeDidReceiveInformational(head)
                    resumeBody(exchange.informationalReceived(status: head.status))
                case .head(let head):
                    perform(exchange.finalHeadReceived(keepAlive: head.keepAlive))
                    try delegate.exchangeDidReceiveHead(head)
                case .body(let range):
                    try delegate.exchangeDidReceiveBody(
                        UnsafeRawBufferPointer(rebasing: input[(base + range.lowerBound)..<(base + range.upperBound)]))
                case .end(let trailers):
                    complete(trailers: trailers, leftover: input.count - offset)
                    return
                }
            } catch {
                fail(.delegate(error))
                return
            }
        }
    }

    private func endOfInput() {
        do throws(HTTPParseError) {
            let event = try parser.inputEnded(authenticated: !stream.endedWithoutCloseNotify)
            if case .end(let trailers) = event {
                complete(trailers: trailers, leftover: 0, peerClosed: true)
            }
        } catch {
            fail(.parse(error))
        }
    }

    private func complete(trailers: [RawHeaderField], leftover: Int, peerClosed: Bool = false) {
        guard let delegate else { return }
        self.delegate = nil
        let action = exchange.responseEnded(bytesFollowed: leftover > 0, peerClosed: peerClosed)
        completedExchanges += 1
        if action == .complete(reusable: true) {
            pool?.release(self)
        } else {
            close()
        }
        delegate.exchangeDidComplete(trailers: trailers)
    }

    private func fail(_ kind: ExchangeFailure.Kind) {
        guard let delegate else { return }
        let failure = ExchangeFailure(
            kind: kind, receivedResponseBytes: parser.hasReceivedBytes, connectionWasReused: isReused)
        exchange.fail()
        self.delegate = nil
        close()
        delegate.exchangeDidFail(failure)
    }
}
