import HTTPTypes

/// A connection pool and the live transfers on one loop thread: what a TinyFire `Session` runs
/// on, and what the agent sends through. The engine starts its own loop, or runs on a loop it
/// is given and shares (the agent's telemetry and firmware engines and their queues run on one).
/// Memory: the pool's connections (each a `readBufferSize` buffer, at most
/// `maxConnectionsPerHost` per host) and one `Transfer` per live request.
package final class Engine: @unchecked Sendable {
    package let settings: EngineSettings
    private let loopResult: Result<EventLoop, SystemResourceError>
    /// Whether `shutdown` stops the loop (the engine started it) or only ends its own part.
    private let ownsLoop: Bool
    /// Whether the engine runs on a loop it shares (and ends only its own part of).
    package var sharesLoop: Bool { !ownsLoop }
    /// The I/O loop, nil when it could not start.
    package var loop: EventLoop? { try? loopResult.get() }
    /// The connections, and what builds them (nil once shut down).
    private var pool: ConnectionPool?
    /// Live transfers by owner, loop-confined.
    private var active: [ObjectIdentifier: Transfer] = [:]

    /// The default header fields, their lines written once.
    let defaultHeaderLines: DefaultHeaderLines

    /// Starts the loop thread (`name` names it).
    package init(settings: EngineSettings, name: String = "tinyfire-io") {
        self.settings = settings
        defaultHeaderLines = DefaultHeaderLines(settings.defaultFields, dropsAcceptEncoding: !settings.automaticDecompression)
        ownsLoop = true
        do throws(SystemResourceError) {
            let loop = try EventLoop(name: name)
            loopResult = .success(loop)
            attach(to: loop)
        } catch {
            loopResult = .failure(error)
        }
    }

    /// Runs on `loop`, shared with whatever else runs there; `shutdown` ends this engine's
    /// transfers and connections and leaves the loop running (its owner stops it).
    package init(settings: EngineSettings, loop: EventLoop) {
        self.settings = settings
        defaultHeaderLines = DefaultHeaderLines(settings.defaultFields, dropsAcceptEncoding: !settings.automaticDecompression)
        ownsLoop = false
        loopResult = .success(loop)
        attach(to: loop)
    }

    private func attach(to loop: EventLoop) {
        let factory = ConnectionFactory(
            loop: loop,
            settings: ConnectionSettings(
                readBufferSize: settings.readBufferSize, tls: settings.tls, maxHeaderBlockBytes: settings.maxHeaderBlockBytes,
                userAgent: settings.defaultFields[.userAgent]))
        pool = ConnectionPool(
            loop: loop, factory: factory, maxConnectionsPerHost: settings.maxConnectionsPerHost,
            idleTimeout: settings.idleConnectionTimeout)
    }

    /// Starts a transfer for `owner` (from any thread; the owner hears back on the loop thread).
    package func start(_ spec: RequestSpec, owner: any TransferOwner) {
        switch loopResult {
        case .failure(let error):
            owner.transferDidFinish(.failure(.resourceExhausted(error.description)), request: nil, response: nil, report: TransferReport())
        case .success(let loop):
            let begin: @Sendable () -> Void = { [self] in
                guard let pool else {
                    // Shut down (on a shared loop, which runs on): the owner hears it.
                    owner.transferDidFinish(.failure(.engineShutDown), request: nil, response: nil, report: TransferReport())
                    return
                }
                let transfer = Transfer(spec: spec, owner: owner, engine: self, loop: loop, pool: pool)
                active[owner.transferOwnerID] = transfer
                transfer.start()
            }
            // When the loop thread is waiting, a request without a file or stream body starts
            // right here: the head goes out from this thread, and the loop thread wakes only
            // for the answer (one thread hand-off per request instead of two). Files stay with
            // the loop thread (sendfile's SIGPIPE is blocked there only); streams may block.
            if spec.bodySource == nil && !loop.inEventLoop && loop.runIfWaiting(begin) { return }
            if !loop.execute(begin) && !ownsLoop {
                // A shared loop its owner stopped: the owner hears it instead of waiting for ever.
                owner.transferDidFinish(.failure(.engineShutDown), request: nil, response: nil, report: TransferReport())
            }
        }
    }

    /// Cancels `owner`'s transfer, if it is running (from any thread).
    package func cancel(_ owner: any TransferOwner) {
        onLoop(owner) { transfer in transfer.cancel(with: .explicitlyCancelled) }
    }

    /// Pauses `owner`'s transfer (from any thread).
    package func suspendTransfer(_ owner: any TransferOwner) {
        onLoop(owner) { transfer in transfer.setSuspended(true) }
    }

    /// Continues `owner`'s paused transfer (from any thread).
    package func resumeTransfer(_ owner: any TransferOwner) {
        onLoop(owner) { transfer in transfer.setSuspended(false) }
    }

    /// Pauses or continues reading `owner`'s body as `paused` says when the loop gets to it
    /// (from any thread).
    package func setFlowPaused(_ owner: any TransferOwner, _ paused: @escaping @Sendable () -> Bool) {
        onLoop(owner) { transfer in transfer.setFlowPaused(paused()) }
    }

    /// Runs `work` on the loop with `owner`'s live transfer. The task holds the owner until it
    /// runs: its identifier cannot pass to a newer owner at the same address meanwhile.
    private func onLoop(_ owner: any TransferOwner, _ work: @escaping @Sendable (Transfer) -> Void) {
        guard case .success(let loop) = loopResult else { return }
        loop.execute { [self] in
            if let transfer = active[owner.transferOwnerID] { work(transfer) }
        }
    }

    /// Called by a transfer when it ends (loop work).
    func transferEnded(_ id: ObjectIdentifier) {
        active[id] = nil
    }

    /// Fails every live transfer (`.engineShutDown`), closes every connection and stops the
    /// loop the engine started (on a shared loop: returns once that ran there; a transfer
    /// started later fails with `.engineShutDown`, also after the loop's owner stopped it). The owner drops the engine after this: its
    /// loop work holds it until then.
    package func shutdown() {
        guard case .success(let loop) = loopResult else { return }
        let end: @Sendable () -> Void = { [self] in
            for transfer in Array(active.values) { transfer.cancel(with: .engineShutDown) }
            pool?.closeAll()
            pool = nil
        }
        guard ownsLoop else {
            loop.runAndWait(end)
            return
        }
        loop.execute(end)
        // The stop flag is checked after tasks run, so the task above runs first.
        loop.shutdown()
    }
}
