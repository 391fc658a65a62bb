import Dispatch
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

/// Owns the loop, the pool and the live transfers of one `Session`.
final class Engine: @unchecked Sendable {
    let configuration: SessionConfiguration
    /// Trust evaluators by host (nil: default validation for every host).
    let serverTrustManager: ServerTrustManager?
    private let loopResult: Result<EventLoop, TinyFireError>
    /// The I/O loop, nil when it could not start.
    var loop: EventLoop? { try? loopResult.get() }
    private var pool: ConnectionPool?
    /// Builds the connections the pool hands out (nil when the loop could not start).
    private var factory: ConnectionFactory?
    /// Live transfers by owner, loop-confined.
    private var active: [ObjectIdentifier: Transfer] = [:]

    /// The session's default header fields, their lines written once.
    let defaultHeaderLines: DefaultHeaderLines

    init(configuration: SessionConfiguration, serverTrustManager: ServerTrustManager? = nil) {
        self.configuration = configuration
        defaultHeaderLines = DefaultHeaderLines(configuration.headers.fields, dropsAcceptEncoding: !configuration.automaticDecompression)
        self.serverTrustManager = serverTrustManager
        do {
            let loop = try EventLoop(name: "tinyfire-io")
            loopResult = .success(loop)
            factory = ConnectionFactory(
                loop: loop,
                settings: ConnectionSettings(
                    readBufferSize: configuration.readBufferSize, tls: configuration.tls,
                    maxHeaderBlockBytes: configuration.maxHeaderBlockBytes,
                    userAgent: configuration.headers.value(for: "User-Agent")))
            pool = ConnectionPool(
                loop: loop, maxConnectionsPerHost: configuration.maxConnectionsPerHost,
                idleTimeout: configuration.idleConnectionTimeout)
        } catch {
            loopResult = .failure(.resourceExhausted(error.description))
        }
    }

    /// Starts a transfer for `owner` (from any thread; the owner hears back on the loop thread).
    func start(_ spec: RequestSpec, owner: TransferOwner) {
        switch loopResult {
        case .failure(let error):
            owner.transferDidFinish(.failure(error), request: nil, response: nil, metrics: TransferMetrics())
        case .success(let loop):
            let begin: @Sendable () -> Void = { [self] in
                guard let pool, let factory else { return }
                let transfer = Transfer(spec: spec, owner: owner, engine: self, loop: loop, pool: pool, factory: factory)
                active[ObjectIdentifier(owner)] = transfer
                transfer.start()
            }
            // When the loop thread is waiting, a request without a file or stream body starts
            // right here: the head goes out from this thread, and the loop thread wakes only
            // for the answer (one thread hand-off per request instead of two). Files stay with
            // the loop thread (sendfile's SIGPIPE is blocked there only); streams may block.
            if spec.bodySource == nil && !loop.inEventLoop && loop.runIfWaiting(begin) { return }
            loop.execute(begin)
        }
    }

    /// Cancels `owner`'s transfer, if it is running (from any thread).
    func cancel(_ owner: TransferOwner) {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in
            active[ObjectIdentifier(owner)]?.cancel(with: .explicitlyCancelled)
        }
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

    /// Called by a transfer when it ends (loop work).
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
            factory = nil
        }
        // The stop flag is checked after tasks run, so the task above runs first.
        loop.shutdown()
    }
}
