#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Connects to the first reachable address of a list, Happy Eyeballs style (RFC 8305): one
/// attempt starts; if it has not succeeded after `attemptDelay`, the next address starts in
/// parallel; a failure starts the next at once. The first to connect wins, the rest are closed.
///
/// Loop-confined. The overall deadline is the caller's (the request's connect timeout), which
/// ends this with `cancel()`. A connector in progress is kept alive by its attempts and its timer
/// (no `weak` in Embedded Swift): it ends with its completion or with `cancel()`, whichever
/// comes first, and not before.
package final class Connector {
    /// Default delay before a parallel attempt: 250 ms (RFC 8305 recommends 150–250 ms).
    package static let defaultAttemptDelay: Duration = .milliseconds(250)

    private final class Attempt: EventLoopHandler {
        let fd: Int32
        let address: SocketAddress
        var registration: Registration?
        /// Set while the attempt is in flight; cleared when it leaves `inFlight`.
        var owner: Connector?

        init(fd: Int32, address: SocketAddress) {
            self.fd = fd
            self.address = address
        }

        func handleEvents(_ events: UInt32) {
            owner?.attemptReady(self)
        }
    }

    private let loop: EventLoop
    private let addresses: [SocketAddress]
    private let attemptDelay: Duration
    private var nextIndex = 0
    private var inFlight: [Attempt] = []
    private var delayTimer: TimerHandle?
    private var failures: [String] = []
    private var failureCodes: [Int32] = []
    private var completion: ((Result<(fd: Int32, address: SocketAddress), ConnectFailure>) -> Void)?

    /// Every address refused or failed.
    package struct ConnectFailure: Error {
        /// One "address: reason" entry per address tried.
        package var attempts: [String]
        /// The errno of each attempt that failed with one (0 for other failures).
        package var codes: [Int32] = []
    }

    package init(loop: EventLoop, addresses: [SocketAddress], attemptDelay: Duration = Connector.defaultAttemptDelay) {
        self.loop = loop
        self.addresses = addresses
        self.attemptDelay = attemptDelay
    }

    /// Starts connecting; `completion` is called once, on the loop, unless `cancel()` comes first.
    package func start(_ completion: @escaping (Result<(fd: Int32, address: SocketAddress), ConnectFailure>) -> Void) {
        self.completion = completion
        startNextAttempt()
    }

    /// Abandons every attempt; the completion is not called.
    package func cancel() {
        completion = nil
        closeAll(except: nil)
    }

    private func startNextAttempt() {
        if let timer = delayTimer {
            loop.cancel(timer)
            delayTimer = nil
        }
        while nextIndex < addresses.count {
            let address = addresses[nextIndex]
            nextIndex += 1
            let fd: Int32
            switch Socket.makeTCP(family: address.family) {
            case .success(let created): fd = created
            case .failure(let error):
                failures.append("\(address): socket: \(errnoMessage(error.code))")
                failureCodes.append(error.code)
                continue
            }
            let attempt = Attempt(fd: fd, address: address)
            let status = Socket.connect(fd, to: address)
            if status == nil {
                succeed(attempt)
                return
            }
            guard status == EINPROGRESS else {
                failures.append("\(address): \(errnoMessage(status ?? 0))")
                failureCodes.append(status ?? 0)
                close(fd)
                continue
            }
            do {
                attempt.registration = try loop.register(fd, interest: .write, handler: attempt)
            } catch {
                failures.append("\(address): out of resources: \(error.description)")
                failureCodes.append(0)
                close(fd)
                continue
            }
            attempt.owner = self
            inFlight.append(attempt)
            if nextIndex < addresses.count {
                // Holds the connector until it fires or is cancelled (closeAll, the next attempt).
                delayTimer = loop.schedule(at: .now() + attemptDelay) { [self] in
                    delayTimer = nil
                    startNextAttempt()
                }
            }
            return
        }
        if inFlight.isEmpty { fail() }
    }

    private func attemptReady(_ attempt: Attempt) {
        let code = Socket.pendingError(attempt.fd)
        if code == 0 {
            succeed(attempt)
            return
        }
        failures.append("\(attempt.address): \(errnoMessage(code))")
        failureCodes.append(code)
        remove(attempt)
        close(attempt.fd)
        if inFlight.isEmpty { startNextAttempt() }
    }

    private func succeed(_ attempt: Attempt) {
        if let registration = attempt.registration { loop.deregister(registration) }
        attempt.owner = nil
        inFlight.removeAll { $0 === attempt }
        closeAll(except: attempt)
        let completion = self.completion
        self.completion = nil
        completion?(.success((attempt.fd, attempt.address)))
    }

    private func fail() {
        let completion = self.completion
        self.completion = nil
        completion?(.failure(ConnectFailure(attempts: failures, codes: failureCodes)))
    }

    private func remove(_ attempt: Attempt) {
        if let registration = attempt.registration { loop.deregister(registration) }
        attempt.registration = nil
        attempt.owner = nil
        inFlight.removeAll { $0 === attempt }
    }

    private func closeAll(except keep: Attempt?) {
        if let timer = delayTimer {
            loop.cancel(timer)
            delayTimer = nil
        }
        for attempt in inFlight where attempt !== keep {
            if let registration = attempt.registration { loop.deregister(registration) }
            attempt.owner = nil
            close(attempt.fd)
        }
        inFlight.removeAll()
    }
}
