import CTinyFireSystem

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

/// Receives what happens to one request/response exchange on a connection. Called on the
/// loop thread. A throwing callback aborts the exchange (the connection is closed) and comes
/// back as `exchangeDidFail` with `.delegate(error)`.
protocol HTTPExchangeDelegate: AnyObject {
    func exchangeDidSend(bytes: Int)
    func exchangeDidReceive(bytes: Int)
    func exchangeDidReceiveInformational(_ head: ResponseHead)
    func exchangeDidReceiveHead(_ head: ResponseHead) throws
    func exchangeDidReceiveBody(_ bytes: UnsafeRawBufferPointer) throws
    func exchangeDidComplete(trailers: [RawHeaderField])
    func exchangeDidFail(_ failure: ExchangeFailure)
}

/// How a TLS handshake ended.
enum TLSHandshakeOutcome {
    case done
    case failed(TransferError.Reason)
}

/// Why an exchange ended without a complete response.
struct ExchangeFailure: Error {
    enum Kind {
        /// A system call failed (errno); the transfer knows the phase.
        case io(Int32)
        /// A TLS record failed (mbedTLS code).
        case tls(Int32)
        /// The request body's source failed (the upload file could not be read).
        case bodySource(String)
        /// The response violated HTTP/1.1, or the connection closed early.
        case parse(HTTPParseError)
        /// The delegate threw (sink full, write error, corrupt gzip, …).
        case delegate(any Error)
    }

    var kind: Kind
    /// Whether any byte of the response arrived before the failure.
    var receivedResponseBytes: Bool
    /// Whether the connection had carried an earlier exchange (a candidate stale connection).
    var connectionWasReused: Bool
}

/// The key a pooled connection is filed under.
struct PoolKey: Hashable, Sendable, CustomStringConvertible {
    var scheme: String
    var host: String
    var port: Int

    var description: String { "\(scheme)://\(host):\(port)" }
}

/// One HTTP/1.1 connection over a non-blocking socket: writes a request head and body, feeds
/// what it reads to a `ResponseParser`, and hands events to the exchange's delegate. Carries
/// one exchange at a time (no pipelining). Loop-confined.
///
/// Memory: one read buffer of `readBufferSize` bytes, allocated when the connection opens,
/// plus the parser's head buffer (bounded by the header block limit).
final class HTTPConnection: EventLoopHandler {
    enum State {
        case idle(since: Instant)
        case active
        case closed
    }

    let key: PoolKey
    let fd: Int32
    let remoteAddress: SocketAddress
    /// `remoteAddress` as text, computed once (getnameinfo is not free).
    let remoteAddressDescription: String
    private let loop: EventLoop
    private var registration: Registration?
    private let readBuffer: UnsafeMutableRawBufferPointer
    private(set) var state: State = .active
    /// Completed exchanges; > 0 means the next one runs on a reused connection.
    private(set) var completedExchanges = 0
    weak var pool: ConnectionPool?

    // The current exchange.
    private var delegate: HTTPExchangeDelegate?
    private var parser = ResponseParser(isHeadRequest: false)
    private var outHead: [UInt8] = []
    private var outBody = Data()
    /// A body streamed from a file through a fixed buffer instead of `outBody`.
    private var fileReader: FileBodyReader?
    private var bodyLength = 0
    /// Sent `Expect: 100-continue`: the body waits for 100, a final response, or a second.
    private var expectContinue = false
    private var awaitingContinue = false
    private var continueTimer: TimerHandle?
    private var written = 0
    private var sending = false
    private var watchingWrite = false
    /// Reading is paused (a suspended request): no read interest, no reads.
    private var readingPaused = false
    /// The TLS stream of an https connection; bytes go through it instead of the socket.
    private(set) var tls: TLSStream?
    /// Set while the TLS handshake runs; called once with its outcome.
    private var handshakeCompletion: ((TLSHandshakeOutcome) -> Void)?
    /// A read continuation is scheduled (TLS data already decrypted inside mbedTLS).
    private var readScheduled = false
    /// The final head's persistence decision.
    private var responseKeepAlive = false
    /// The request body was not fully sent (the server answered early).
    private var requestCutShort = false

    init(key: PoolKey, fd: Int32, remoteAddress: SocketAddress, loop: EventLoop, readBufferSize: Int) throws(TinyFireError) {
        self.key = key
        self.fd = fd
        self.remoteAddress = remoteAddress
        self.remoteAddressDescription = remoteAddress.description
        self.loop = loop
        self.readBuffer = .allocate(byteCount: readBufferSize, alignment: 16)
        do {
            registration = try loop.register(fd, interest: .read, handler: self)
        } catch {
            // Fully initialized, so deinit still runs: it frees the buffer; close the fd here.
            Glibc.close(fd)
            state = .closed
            throw error
        }
    }

    deinit {
        // Normally closed through close(); a connection dropped with its loop still owns its fd.
        if case .closed = state {} else { Glibc.close(fd) }
        readBuffer.deallocate()
    }

    var isReused: Bool { completedExchanges > 0 }

    /// How long a request with `Expect: 100-continue` waits before sending its body anyway
    /// (curl waits one second too).
    static let expectContinueWait: Duration = .seconds(1)

    /// Starts an exchange: writes `head` and the body (from memory, or from `bodyFile` through a
    /// fixed 64 KiB buffer), then reads the response.
    func start(
        head: [UInt8], body: Data, bodyFile: RequestBodyFile? = nil, expectContinue: Bool = false, isHeadRequest: Bool,
        limits: ResponseParser.Limits, delegate: HTTPExchangeDelegate
    ) {
        state = .active
        self.delegate = delegate
        parser = ResponseParser(isHeadRequest: isHeadRequest, limits: limits)
        outHead = head
        outBody = body
        bodyLength = body.count
        fileReader = nil
        self.expectContinue = expectContinue
        awaitingContinue = false
        written = 0
        if let bodyFile {
            switch FileBodyReader.open(bodyFile) {
            case .success(let reader):
                fileReader = reader
                bodyLength = Int(bodyFile.length)
            case .failure(let problem):
                fail(.bodySource(problem.message))
                return
            }
        }
        readingPaused = false
        sending = true
        responseKeepAlive = false
        requestCutShort = false
        writeRequest()
    }

    /// Abandons the current exchange and closes the connection, without calling the delegate.
    func abort() {
        delegate = nil
        close()
    }

    /// Puts the connection in the idle state (the pool calls this).
    func markIdle(now: Instant) {
        state = .idle(since: now)
    }

    /// Runs the TLS handshake over this connection, then calls `completion` once (loop thread).
    func startTLS(_ stream: TLSStream, completion: @escaping (TLSHandshakeOutcome) -> Void) {
        tls = stream
        handshakeCompletion = completion
        continueHandshake()
    }

    private func continueHandshake() {
        guard let tls, let completion = handshakeCompletion else { return }
        switch tls.handshake() {
        case .done:
            handshakeCompletion = nil
            setWatchingWrite(false)
            completion(.done)
        case .wantRead:
            setWatchingWrite(false)
        case .wantWrite:
            setWatchingWrite(true)
        case .failed(let code):
            handshakeCompletion = nil
            let flags = tls.verificationFlags
            if flags != 0 {
                completion(.failed(.certificateVerificationFailed(reasons: tlsVerificationReasons(flags))))
            } else {
                completion(.failed(.tlsFailed(code: code, message: tlsErrorMessage(code))))
            }
        }
    }

    func close() {
        if case .closed = state { return }
        if case .idle = state { tls?.closeNotify() }
        state = .closed
        if let continueTimer { loop.cancel(continueTimer) }
        continueTimer = nil
        fileReader = nil
        if let registration {
            loop.deregister(registration)
            self.registration = nil
        }
        Glibc.close(fd)
        delegate = nil
        outBody = Data()
        pool?.connectionClosed(self)
    }

    // MARK: - Events

    func handleEvents(_ events: UInt32) {
        switch state {
        case .closed:
            return
        case .idle:
            // An idle connection that becomes readable was closed by the server (or it sent
            // bytes nobody asked for): either way it cannot be reused.
            close()
        case .active:
            if handshakeCompletion != nil {
                continueHandshake()
                return
            }
            if sending && events & EpollBits.writable != 0 {
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
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        while sending {
            let headCount = outHead.count
            let result: IOResult
            if written < headCount {
                // The head, with an in-memory body in the same sendmsg when nothing has to wait.
                let withBody = !expectContinue && fileReader == nil && tls == nil
                result = outHead.withUnsafeBytes { headBytes in
                    outBody.withUnsafeBytes { bodyBytes in
                        let first = UnsafeRawBufferPointer(rebasing: headBytes[written...])
                        if let tls { return tls.write(first) }
                        return Socket.write(fd, first, withBody ? UnsafeRawBufferPointer(bodyBytes) : empty)
                    }
                }
            } else if awaitingContinue {
                return
            } else if let reader = fileReader, tls == nil, reader.pending.count == 0 {
                // Plain HTTP: the kernel copies file pages straight to the socket.
                result = reader.sendFile(to: fd)
                if case .failed(let code) = result, code == 0 {
                    sending = false
                    setWatchingWrite(false)
                    fail(.bodySource(reader.shortFileMessage))
                    return
                }
            } else if let reader = fileReader {
                if reader.pending.count == 0, let problem = reader.fill() {
                    sending = false
                    setWatchingWrite(false)
                    fail(.bodySource(problem))
                    return
                }
                result = tls?.write(reader.pending) ?? Socket.write(fd, reader.pending, empty)
                if case .bytes(let n) = result { reader.consume(n) }
            } else {
                let offset = written - headCount
                result = outBody.withUnsafeBytes { bytes in
                    let chunk = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                    return tls?.write(chunk) ?? Socket.write(fd, chunk, empty)
                }
            }
            switch result {
            case .bytes(let n):
                written += n
                delegate?.exchangeDidSend(bytes: n)
                if written == headCount + bodyLength {
                    sending = false
                    outBody = Data()
                    fileReader = nil
                    setWatchingWrite(false)
                } else if written == headCount && expectContinue {
                    expectContinue = false
                    awaitingContinue = true
                    setWatchingWrite(false)
                    continueTimer = loop.schedule(at: .now() + Self.expectContinueWait) { [weak self] in
                        self?.continueTimer = nil
                        self?.stopAwaitingContinue()
                    }
                    return
                }
            case .wouldBlock:
                setWatchingWrite(true)
                return
            case .endOfFile:
                return
            case .failed(let code) where tls != nil:
                sending = false
                setWatchingWrite(false)
                fail(.tls(code))
                return
            case .failed(let code):
                // The server may have answered and closed (413, 401): read what it said
                // before reporting the write error.
                sending = false
                setWatchingWrite(false)
                readResponse(writeError: code)
                return
            }
        }
    }

    /// A 100 Continue arrived, or the wait ran out: send the body.
    private func stopAwaitingContinue() {
        guard awaitingContinue else { return }
        awaitingContinue = false
        if let continueTimer { loop.cancel(continueTimer) }
        continueTimer = nil
        guard case .active = state, sending else { return }
        writeRequest()
    }

    private func setWatchingWrite(_ on: Bool) {
        guard watchingWrite != on else { return }
        watchingWrite = on
        updateInterest()
    }

    /// Stops or restarts reading the response (the kernel's receive buffer then fills and TCP
    /// flow control holds the server back). Takes effect after the buffer being processed.
    func setReadingPaused(_ paused: Bool) {
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
        let rounds = tls == nil ? 8 : 64
        for _ in 0..<rounds {
            guard case .active = state, delegate != nil, !readingPaused else { return }
            let result = tls.map { $0.read(into: readBuffer) } ?? Socket.read(fd, into: readBuffer)
            switch result {
            case .bytes(let n):
                delegate?.exchangeDidReceive(bytes: n)
                process(UnsafeRawBufferPointer(rebasing: readBuffer[0..<n]))
                if tls == nil && n < readBuffer.count { return }
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
                fail(tls == nil ? .io(code) : .tls(code))
                return
            }
        }
        // Out of rounds with data still inside mbedTLS: continue after other work.
        if tls != nil, !readScheduled {
            readScheduled = true
            _ = loop.schedule(at: .now()) { [weak self] in
                self?.readScheduled = false
                self?.readResponse()
            }
        }
    }

    private func process(_ input: UnsafeRawBufferPointer) {
        var offset = 0
        while let delegate {
            let event: ResponseParser.Event
            let consumed: Int
            do {
                (consumed, event) = try parser.parse(UnsafeRawBufferPointer(rebasing: input[offset...]))
            } catch {
                fail(.parse(error))
                return
            }
            let base = offset
            offset += consumed
            do {
                switch event {
                case .needMore:
                    return
                case .informational(let head):
                    delegate.exchangeDidReceiveInformational(head)
                    if head.status == 100 { stopAwaitingContinue() }
                case .head(let head):
                    if sending {
                        // An early final response (413, 401…) ends the upload; the
                        // connection cannot be reused since the body was cut short.
                        sending = false
                        outHead = []
                        outBody = Data()
                        fileReader = nil
                        awaitingContinue = false
                        if let continueTimer { loop.cancel(continueTimer) }
                        continueTimer = nil
                        setWatchingWrite(false)
                        requestCutShort = true
                    }
                    responseKeepAlive = head.keepAlive
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
        do {
            let event = try parser.inputEnded()
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
        let reusable = !peerClosed && leftover == 0 && !requestCutShort && !sending && responseKeepAlive
        completedExchanges += 1
        if reusable {
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
        self.delegate = nil
        close()
        delegate.exchangeDidFail(failure)
    }
}

/// A request body that lives in a file.
struct RequestBodyFile: Sendable {
    var path: String
    var length: UInt64

    /// The file at `path` with its current size.
    /// - Throws: `.invalidRequest` naming the file when it cannot be read or is not a regular file.
    init(regularFileAt path: String) throws(TinyFireError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw .invalidRequest(reason: "cannot read the upload file \(path): \(errnoMessage(errno))")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw .invalidRequest(reason: "the upload file \(path) is not a regular file")
        }
        self.path = path
        self.length = UInt64(info.st_size)
    }
}

/// Reads an upload file through one fixed buffer (64 KiB): memory does not grow with the file.
final class FileBodyReader {
    static let bufferSize = 64 * 1024
    private let fd: Int32
    private let path: String
    private var remaining: UInt64
    private let buffer: UnsafeMutableRawBufferPointer
    private var start = 0
    private var end = 0

    private init(fd: Int32, path: String, length: UInt64) {
        self.fd = fd
        self.path = path
        self.remaining = length
        self.buffer = .allocate(byteCount: Self.bufferSize, alignment: 16)
    }

    deinit {
        Glibc.close(fd)
        buffer.deallocate()
    }

    struct OpenError: Error {
        let message: String
    }

    static func open(_ file: RequestBodyFile) -> Result<FileBodyReader, OpenError> {
        let fd = Glibc.open(file.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(OpenError(message: "cannot open \(file.path): \(errnoMessage(errno))")) }
        return .success(FileBodyReader(fd: fd, path: file.path, length: file.length))
    }

    /// Bytes read and not yet written.
    var pending: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[start..<end]) }

    func consume(_ count: Int) { start += count }

    /// Message for a file that ended before its announced length.
    var shortFileMessage: String { "\(path) ended \(remaining) bytes early (it changed during the upload)" }

    /// Sends up to 1 MiB of the file with `sendfile` (no copy through user space).
    /// `.failed(0)` means the file ended early.
    func sendFile(to socket: Int32) -> IOResult {
        guard remaining > 0 else { return .failed(0) }
        let count = UInt(min(remaining, 1 << 20))
        while true {
            let n = tinyfire_sendfile(socket, fd, count)
            if n > 0 {
                remaining -= UInt64(n)
                return .bytes(n)
            }
            if n == 0 { return .failed(0) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed(errno)
            }
        }
    }

    /// Refills the buffer; a message when the file cannot be read or ends early.
    func fill() -> String? {
        start = 0
        end = 0
        guard remaining > 0 else { return "\(path) has more bytes than announced" }
        let want = Int(min(UInt64(buffer.count), remaining))
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, want)
            if n > 0 {
                end = n
                remaining -= UInt64(n)
                return nil
            }
            if n == 0 { return "\(path) ended \(remaining) bytes early (it changed during the upload)" }
            if errno != EINTR { return "cannot read \(path): \(errnoMessage(errno))" }
        }
    }
}
