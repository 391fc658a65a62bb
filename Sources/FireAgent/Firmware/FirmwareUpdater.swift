import HTTPTypes
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The firmware flow's I/O: it polls the manifest, downloads, verifies, runs the commands and
/// reports, on a thread of its own so a long download or install never holds the daemon's loop.
/// Every decision is `UpdateFlow`'s, its waits and retries included; this type only carries its
/// effects out, in order (report, persist, act), keeps the instants of the timers the flow armed,
/// and feeds it what happened (a gate found closed or open, a timer fired).
///
/// Memory: one `FirmwareClient` (its engine's 64 KiB read buffers and the 64 KiB bound on the
/// manifest), the kept manifest (at most 64 KiB), up to 64 KiB of a command's output, and the
/// report queue's index. The image goes to disk through the engine's fixed buffer; nothing
/// grows with its size.
package final class FirmwareUpdater: @unchecked Sendable {
    // @unchecked: the mutable state below `flow` is touched only by the updater's thread;
    // `control` (a lock) and `wake` are what other threads share with it.

    /// What `fire-agent status` shows.
    package typealias Snapshot = AgentStatus.Firmware

    private struct Control {
        var stopping = false
        var pollNow = false
        var recheck = false
        var snapshot: Snapshot
    }

    private let config: AgentConfig.Firmware
    private let logger: Logger
    private let store: FirmwareStore
    private let client: FirmwareClient
    private let source: any FirmwareSource
    /// The image: fetched, judged against space and links, verified.
    private let fetcher: ImageFetcher
    /// The device's commands, boot ID and install gates.
    private let commands: UpdateCommands
    /// The log, the status event and the `fire_agent_update` point of each report.
    private let reporter: UpdateReporter
    private let onChange: @Sendable () -> Void
    private let crashPoints: CrashPoints
    private let control: Locked<Control>
    /// The firmware flow's lock (`FirmwareStore.lockFlow`), -1 once released.
    private let flowLock: Locked<Int32>
    /// Wakes the updater's thread (a command, a stop).
    private let wake: WakePipe
    /// Signalled once the updater's thread ended.
    private let finished: WakePipe
    /// Whether the wall clock may judge a manifest's expiry.
    private let wallClock: WallClock

    private var flow: UpdateFlow
    /// The manifest being acted on (verified), its bytes' digest, and its signature.
    private var manifest: FirmwareManifest?
    private var nextPoll: Instant
    /// When each timer the flow armed fires. Only instants: what a timer means, and which
    /// ones stand, is the flow's (`flow.waits`).
    private var deadlines: [UpdateTimer: Instant] = [:]
    private var stateWriteFailed = false
    /// After a failed state write: when to try again, and how many writes failed in a row.
    private var stateRetryAt: Instant?
    private var stateWriteFailures = 0
    /// What the last new offer came to (`offered 2.1.0`, `up to date (2.0.0 runs)`, `refused: …`):
    /// the status keeps saying it while polls find nothing new.
    private var lastVerdict: String?
    /// The last poll had an answer from the server.
    private var pollReachedServer = false

    /// Opens the firmware directory and reads the state.
    /// - Parameters:
    ///   - config: the firmware section.
    ///   - agentConfig: the whole config (device id, the server's TLS settings, the spool).
    ///   - logger: where transitions and command output go.
    ///   - environment: in test builds, `FIRE_AGENT_FIRMWARE_EXIT_AT` (`CrashPoints`); release
    ///     builds read nothing from it.
    ///   - wallClock: what the wall clock can be trusted with (default: the agent's, with its
    ///     floor in `queue.directory`).
    ///   - userAgent: the `User-Agent` of every request, when `server` is not given.
    ///   - points: where the `fire_agent_update` points go (the telemetry queue); nil: none are made.
    ///   - server: the fleet server as the daemon set it up for all its clients; nil: set up
    ///     from `agentConfig` and `userAgent` here.
    ///   - loop: the event loop its client and report queue run on, shared with the daemon's
    ///     telemetry (its owner stops it after the updater stopped); nil: one of their own.
    ///   - onChange: called (from the updater's thread) when the snapshot changed.
    /// - Throws: `AgentError` when the directory or the report queue cannot be used.
    package init(
        config: AgentConfig.Firmware, agentConfig: AgentConfig, logger: Logger, environment: [String: String],
        wallClock: WallClock? = nil, userAgent: String = FleetServer.defaultUserAgent, points: AgentPoints?,
        server: FleetServer? = nil, loop: EventLoop? = nil, onChange: @escaping @Sendable () -> Void
    ) throws(AgentError) {
        self.config = config
        #if FIRE_AGENT_CRASH_POINTS
            // A test seam like the crash points: judge routes in another namespace.
            let reachabilityNamespace = environment["FIRE_AGENT_REACHABILITY_NETNS"]
        #else
            let reachabilityNamespace: String? = nil
        #endif
        let wallClock =
            wallClock ?? WallClock(floorFile: agentConfig.queue.directory + "/clock-floor", requireSync: agentConfig.clock.requireSync)
        self.wallClock = wallClock
        self.logger = logger
        self.onChange = onChange
        let crashPoints = CrashPoints(environment: environment)
        self.crashPoints = crashPoints
        if let problem = FileTrust.privateDirectoryProblem(config.directory) {
            throw AgentError(description: "firmware.directory: \(problem)")
        }
        let store = try FirmwareStore(directory: config.directory)
        self.store = store
        do throws(SystemResourceError) {
            wake = try WakePipe()
            finished = try WakePipe()
        } catch {
            throw AgentError(description: "firmware updates: \(error.description)")
        }
        let lock = try store.lockFlow()
        flowLock = Locked(lock)
        flow = Self.makeFlow(state: Self.loadState(store, logger: logger), config: config)
        do throws(AgentError) {
            let fleet: FleetServer
            if let server {
                fleet = server
            } else {
                fleet = try FleetServer(config: agentConfig, userAgent: userAgent)
            }
            let client = FirmwareClient(server: fleet, firmware: config, loop: loop)
            self.client = client
        } catch {
            close(lock)
            throw error
        }
        let source: any FirmwareSource
        do throws(AgentError) {
            source = try SignedManifestSource(
                config: config, deviceID: agentConfig.device.id, client: client, store: store, logger: logger)
        } catch {
            client.shutdown()
            close(lock)
            throw error
        }
        self.source = source
        nextPoll = .now()
        let control = Locked(Control(snapshot: Snapshot(phase: UpdatePhase.idle.rawValue, downloadedBytes: 0, size: 0)))
        self.control = control
        fetcher = ImageFetcher(
            config: config, client: client, store: store, logger: logger, wallClock: wallClock, network: agentConfig.network,
            reachabilityNamespace: reachabilityNamespace,
            onProgress: { bytes, statusDue in
                control.withLock { $0.snapshot.downloadedBytes = bytes }
                if statusDue { onChange() }
            })
        commands = UpdateCommands(config: config, store: store, logger: logger, crashPoints: crashPoints)
        reporter = UpdateReporter(
            source: source, points: points, deviceID: agentConfig.device.id, precision: agentConfig.telemetry.precision, logger: logger)
        publish(notifying: false)
    }

    deinit { releaseLock() }

    /// Releases the flow's lock (the thread ended, or the one-shot cycle did).
    private func releaseLock() {
        flowLock.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    /// Starts the updater's thread (`fire-agent-fw`).
    /// - Parameter network: what reachability says about the route to the server now (the
    ///   report queue waits while it is down).
    package func start(network: OfflineQueueReplay.Network) {
        source.start(network: network)
        do throws(SystemResourceError) {
            try BlockingWork.run(label: "fire-agent-fw", stackBytes: BlockingWork.callbackStack) { [self] in
                run()
                releaseLock()
                finished.signal()
            }
        } catch {
            logger.error("firmware updates cannot start: \(error.description)")
            releaseLock()
            finished.signal()
        }
    }

    /// Tells the report queue what reachability says now.
    package func network(_ network: OfflineQueueReplay.Network) { source.network(network) }

    /// What one firmware cycle (`fire-agent firmware update --once`) came to.
    package enum CycleOutcome: Sendable, Equatable {
        /// Nothing to do: no offer, the offer already runs, or it was acted on before.
        case upToDate(String)
        /// Installed this cycle; the new version runs after the reboot (the reboot command
        /// ran, or the device waits for one).
        case installed(String)
        /// The new version passed its confirmation and was committed this cycle.
        case committed(String)
        /// The offer was refused before anything was done (signature, device type, version,
        /// expiry).
        case refused(String)
        /// The update failed (download, image, installer, commit).
        case failed(String)
        /// The new version failed its health check or deadline and was rolled back (or the
        /// rollback is under way: the reboot into the old version comes next).
        case rolledBack(String)
        /// Not finished now, to be taken up again: the server was not reached, a download
        /// waits for its retry, space, a trusted clock or a sync.
        case deferred(String)
    }

    /// Runs one cycle in the calling thread, as the daemon would run it — resume, the health
    /// check with its attempts, one poll, the download, verification, install and reboot
    /// command it leads to, the commit after a sync — and delivers the reports once. Nothing
    /// waits for a download retry: the state keeps it for the next cycle or the daemon. The
    /// updater is done afterwards (its lock, queue and connections released).
    /// - Returns: what it came to.
    package func runOnce() -> CycleOutcome {
        defer { releaseLock() }
        let before = flow.state.update
        prepare()
        settleHealthChecks()
        if stateRetryAt == nil { poll() }
        settleHealthChecks()
        if flow.phase == .confirming, !flow.awaitsHealthCheck, stateRetryAt == nil {
            poll()  // the sync the commit waits for, when the check passed after the first
        }
        let unsent = source.flushReports()
        if unsent > 0 { logger.notice("firmware reports not delivered yet: they wait for the next run", metadata: ["queued": "\(unsent)"]) }
        defer {
            source.close()
            client.shutdown()
        }
        return outcome(since: before)
    }

    /// Runs the health check's remaining attempts, waiting their intervals (and the deadline).
    private func settleHealthChecks() {
        while flow.phase == .confirming, stateRetryAt == nil, let at = deadlines[.healthCheck] {
            let timer: UpdateTimer = deadlines[.confirmDeadline].map { $0 <= at } == true ? .confirmDeadline : .healthCheck
            sleepUntil(deadlines[timer] ?? at)
            fire(timer)
        }
    }

    /// Fires `timer`: the flow says what it was armed for.
    private func fire(_ timer: UpdateTimer) {
        deadlines[timer] = nil
        feed(.timerFired(timer))
    }

    /// What the update waits for now (`status`), nil when nothing.
    private var waitReason: String? { flow.waits.held?.reason }

    private func outcome(since before: UpdateRecord?) -> CycleOutcome {
        let update = flow.state.update
        let version = update?.version ?? ""
        let reason = update?.reason ?? ""
        let checked = control.withLock { $0.snapshot.lastCheckResult } ?? ""
        if stateRetryAt != nil {
            return .deferred("the firmware state cannot be written (see the log); nothing acts on it until it can")
        }
        switch flow.phase {
        case .installed:
            if let waiting = waitReason { return .installed("\(version) installed: the reboot waits: \(waiting)") }
            return .installed("\(version) installed: " + (config.reboot != nil ? "the reboot command ran" : "waiting for a reboot into it"))
        case _ where waitReason != nil && !flow.phase.isTerminal:
            return .deferred("\(version): \(flow.phase.rawValue), waiting: \(waitReason ?? "")")
        case .rollingBack:
            let next =
                waitReason.map { "the reboot waits: \($0)" }
                ?? (config.reboot != nil ? "the reboot command ran" : "waiting for a reboot into the old version")
            return .rolledBack("\(version) rolled back: \(reason); \(next)")
        case .confirming:
            let waiting = flow.awaitsHealthCheck ? "its health check has not passed" : "waiting for a sync with the server"
            return .deferred("\(version) runs, not committed yet: \(waiting)" + (checked.isEmpty ? "" : " (last poll: \(checked))"))
        case .downloading, .verifying, .installing:
            return .deferred("\(version): \(flow.phase.rawValue), to be continued" + (reason.isEmpty ? "" : ": \(reason)"))
        case .done where update != before:
            return .committed("\(version) committed")
        case .failed where update != before && reason.hasPrefix("rolled back"):
            return .rolledBack("\(version): \(reason)")
        default:
            break
        }
        if lastVerdict?.hasPrefix("refused: ") == true, flow.phase == .failed {
            return .refused("\(version.isEmpty ? "the offer" : version) refused: \(reason)")
        }
        if flow.phase == .failed, update != before { return .failed("\(version) failed: \(reason)") }
        if checked.hasPrefix("waiting: ") { return .deferred(checked) }
        if !pollReachedServer { return .deferred("the update server was not reached: \(checked)") }
        return .upToDate(checked.isEmpty ? "nothing offered" : checked)
    }

    /// Asks a waiting step again at once (the route changed: a download that waits for another
    /// link may go).
    package func recheckWaits() {
        control.withLock { $0.recheck = true }
        wake.signal()
    }

    /// Polls the manifest at once (the route to the server came back).
    package func pollNow() {
        control.withLock { $0.pollNow = true }
        wake.signal()
    }

    /// Stops: a download in flight is cancelled (its bytes stay for the next start), the
    /// thread ends after the step it is in. An installer that is running is not killed; the
    /// flow records its outcome as unknown at the next start if the agent exits before it ends.
    /// - Parameter timeout: how long to wait for the thread.
    /// - Returns: whether the thread ended in time.
    @discardableResult
    package func stop(timeout: Duration) -> Bool {
        control.withLock { $0.stopping = true }
        fetcher.cancel()
        wake.signal()
        let ended = finished.wait(timeout: timeout, consume: false)
        source.close()
        // On the daemon's shared loop the client ends its part now, busy or not: a request the
        // thread is still waiting for fails (`.engineShutDown`) instead of outliving the loop.
        // On a loop of its own, only once the thread ended (a stopped loop answers no one).
        if ended || client.engine.sharesLoop { client.shutdown() }
        return ended
    }

    /// The status `fire-agent status` shows.
    package var snapshot: Snapshot { control.withLock { $0.snapshot } }

    private var stopping: Bool { control.withLock { $0.stopping } }

    // MARK: - The loop

    private func run() {
        logger.info(
            "firmware updates on",
            metadata: ["manifest": "\(config.manifestURL)", "pollInterval": "\(ConfigReader.describe(config.pollInterval))"])
        prepare()
        while !stopping {
            let now = Instant.now()
            let asked = control.withLock { control -> Bool in
                defer { control.pollNow = false }
                return control.pollNow
            }
            let recheck = control.withLock { control -> Bool in
                defer { control.recheck = false }
                return control.recheck
            }
            // The route back or changed: what waited for it is asked at once.
            var early: Set<UpdateTimer> = asked ? UpdateTimer.firedByServerBack : []
            if recheck { early.formUnion(UpdateTimer.firedByRouteChange) }
            for timer in early where deadlines[timer] != nil { deadlines[timer] = now }
            if asked { nextPoll = now }
            if let at = stateRetryAt {
                // Nothing acts on a state that is not on disk: no timer fires, polls wait too.
                if now >= at || asked {
                    stateRetryAt = nil
                    resumeFromDisk()
                    continue
                }
                if now >= nextPoll { nextPoll = .now() + config.pollInterval }
            } else if let (timer, _) = deadlines.filter({ $0.value <= now }).min(by: { Self.order($0, $1) }) {
                fire(timer)
                continue
            }
            if now >= nextPoll {
                pollAndSchedule()
                continue
            }
            let timers = stateRetryAt.map { [$0] } ?? Array(deadlines.values)
            let deadline = timers.reduce(nextPoll, min)
            wake.wait(timeout: deadline.since(.now()))
        }
    }

    /// Which of two due timers fires first: the earlier, and at the same instant a download's
    /// retry, the deadline, the health check, then a held step.
    private static func order(_ a: (key: UpdateTimer, value: Instant), _ b: (key: UpdateTimer, value: Instant)) -> Bool {
        if a.value != b.value { return a.value < b.value }
        let rank: [UpdateTimer] = [.downloadRetry, .confirmDeadline, .healthCheck, .gate]
        return (rank.firstIndex(of: a.key) ?? 0) < (rank.firstIndex(of: b.key) ?? 0)
    }

    /// Where every run starts: the manifest an update under way follows, an installer an
    /// earlier agent started waited for, and the flow resumed from what runs.
    private func prepare() {
        if let update = flow.state.update, !update.phase.isTerminal {
            manifest = source.restore(digest: update.manifestDigest)
        }
        if flow.phase == .installing, !store.waitForInstaller(timeout: .milliseconds(0)) {
            // The agent stopped while its installer ran, and the installer still runs: its
            // outcome is known only once it ends (and the next boot shows it).
            logger.warning("the installer started before this agent's restart still runs: waiting for it to end")
            _ = store.waitForInstaller(timeout: config.installTimeout)
        }
        // Said at start, not only once an install waits for it (then not again in this spell).
        _ = commands.inhibitReason()
        let version = commands.bootedVersion()
        perform(flow.resume(version: version, bootID: commands.bootID(), now: .now()))
        if config.commitEveryStart, flow.phase.isTerminal { markRunningGood() }
        publish()
    }

    /// `firmware.commitEveryStart`: no update awaits its confirmation, so the version that runs
    /// is the good one; the commit command (`UpdateCommands.commit()`, which logs its run) says so to the boot
    /// loader (RAUC's `mark-good` gives the booted slot its attempts back). Nothing else
    /// depends on it.
    private func markRunningGood() {
        if case .commitExited(false, let detail) = commands.commit() {
            logger.error("firmware: the running version was not marked good at start", metadata: ["reason": "\(detail)"])
        }
    }

    /// Polls now; the next poll comes a poll interval (with jitter) later.
    private func pollAndSchedule() {
        poll()
        let spread = 1 + config.jitter * Double.random(in: -1...1)
        nextPoll = .now() + config.pollInterval * spread
    }

    /// Feeds `event` and carries out what follows.
    private func feed(_ event: UpdateEvent) {
        perform(flow.handle(event, now: WallTime.now()))
    }

    /// Carries out `effects` in order; an action's outcome is fed back at once.
    private func perform(_ effects: [UpdateEffect]) {
        // Reports of effects left undone (a failed write, a stop) are not reported later as
        // if they were news.
        defer { while flow.takeReport() != nil {} }
        var work = effects[...]
        while let effect = work.popFirst() {
            if stopping, effect != .persist, effect != .report { return }
            var outcome: UpdateEvent?
            switch effect {
            case .report:
                if let record = flow.takeReport() {
                    reporter.report(record, downloadedBytes: control.withLock { $0.snapshot.downloadedBytes })
                }
            case .persist:
                guard persist() else { return }  // not on disk: nothing may act on it
            case .download(let fromZero):
                if let reason = fetcher.linkGateReason(manifest: manifest) {
                    work = hold(effect, reason: reason, kind: .link)[...] + work
                    break
                }
                let space = fetcher.stagingSpace(fromZero: fromZero, manifest: manifest)
                switch space.verdict {
                case .waits(let reason):
                    // Space can come back: asked again on the retry backoff; the note (and so
                    // the state and the log) changes only when the reason does.
                    work = hold(effect, reason: reason, kind: .space, detail: ["free": "\(space.free)"])[...] + work
                case .never(let reason):
                    outcome = .downloadFailed(reason: reason, permanent: true, serverReached: false)
                case .fits:
                    work = goOn()[...] + work
                    outcome = fetcher.download(fromZero: fromZero, manifest: manifest)
                }
            case .pollFirst:
                pollAndSchedule()
                outcome = .polled
            case .arm(let timer, let delay):
                deadlines[timer] = .now() + delay
                switch timer {
                case .downloadRetry:
                    logger.info("firmware download will be tried again", metadata: ["in": "\(ConfigReader.describe(delay))"])
                case .healthCheck:
                    logger.info("firmware health check will run again", metadata: ["in": "\(ConfigReader.describe(delay))"])
                case .gate, .confirmDeadline: break
                }
            case .accountConfirmation: work = confirmTick()[...] + work
            case .verify: outcome = fetcher.verify(manifest: manifest, bootID: commands.bootID())
            case .install: outcome = commands.install(manifest: manifest)
            case .reboot:
                // Into the new version: the window and the lock; back to the old one: the lock.
                if let reason = flow.phase == .rollingBack ? commands.inhibitReason() : commands.installGateReason() {
                    work = hold(.reboot, reason: reason, kind: .install, detail: localTime)[...] + work
                } else {
                    work = goOn()[...] + work
                    commands.reboot(phase: flow.phase)
                }
            case .installGate:
                if let reason = commands.installGateReason() {
                    work = hold(.installGate, reason: reason, kind: .install, detail: localTime)[...] + work
                } else {
                    work = goOn()[...] + work
                    outcome = .installAllowed
                }
            case .checkBooted: outcome = .booted(version: commands.bootedVersion(), bootID: commands.bootID())
            case .commit: outcome = commands.commit()
            case .discardImage:
                fetcher.discard()
                if flow.phase.isTerminal { source.forget(except: nil) }
            case .healthCheck:
                // The time spent so far counts first: a deadline passed ends it before a check.
                work = confirmTick()[...] + work
                guard flow.awaitsHealthCheck else { break }
                outcome = commands.healthCheck(
                    version: flow.state.update?.version ?? "", attempt: (flow.state.update?.healthAttempts ?? 0) + 1)
            case .rollback:
                guard flow.rollbackStarts() else { break }
                guard persist() else { return }  // started only once that is on disk
                outcome = commands.rollback(version: flow.state.update?.version ?? "")
            }
            if flow.phase == .confirming, flow.state.update?.confirmMark == nil {
                // Confirmation time counts from here.
                work = confirmTick()[...] + work
            }
            publish()
            if let outcome {
                if stopping, case .downloadFailed = outcome { return }  // cancelled by stop: resumes at the next start
                if case .gateClosed(let step, let reason, let kind) = outcome {
                    work = hold(step, reason: reason, kind: kind)[...] + work
                } else {
                    work = flow.handle(outcome, now: WallTime.now())[...] + work
                }
            }
            // What the flow no longer waits for (a phase left, an update ended) does not fire.
            for timer in deadlines.keys where !flow.waits.armed.contains(timer) { deadlines[timer] = nil }
        }
    }

    private func persist() -> Bool {
        do {
            try store.save(flow.state)
            if stateWriteFailed { logger.info("firmware state written again") }
            stateWriteFailed = false
            stateWriteFailures = 0
        } catch {
            stateWriteFailures += 1
            let delay = QueueBackoff(initial: config.retryInitial, maximum: config.retryMaximum)
                .delay(afterFailure: stateWriteFailures, random: Double.random(in: 0...1))
            if !stateWriteFailed {
                logger.error(
                    "firmware state not written: the update waits and tries again (logged once until it succeeds)",
                    metadata: ["reason": "\(error)", "in": "\(ConfigReader.describe(delay))"])
            }
            stateWriteFailed = true
            // The flow is read again from disk once the write succeeds: its waits start over.
            deadlines.removeAll()
            stateRetryAt = .now() + delay
            return false
        }
        if flow.phase != .installing {
            let step =
                switch flow.phase {
                case .confirming where config.healthCheck != nil && flow.state.update?.healthy == true: "healthy"
                case .rollingBack where flow.state.update?.rollbackRan == true: "rollback-started"
                default: flow.phase.rawValue
                }
            crashPoints.exit(at: step, "after persisting \(step)", logger: logger)
        }
        return true
    }

    /// After a failed state write, goes on from the state on disk, as a restart would: the
    /// step whose state could not be written is done again once it can be.
    private func resumeFromDisk() {
        // A write that failed for lack of space must find it now: try it first.
        flow = Self.makeFlow(state: Self.loadState(store, logger: logger), config: config)
        guard persist() else { return }
        if let update = flow.state.update, !update.phase.isTerminal {
            manifest = source.restore(digest: update.manifestDigest)
        } else {
            manifest = nil
        }
        perform(flow.resume(version: commands.bootedVersion(), bootID: commands.bootID(), now: WallTime.now()))
        publish()
        // What the server offered while the state could not be written is asked for again.
        nextPoll = min(nextPoll, .now())
    }

    /// The flow over `state`, with the config's policies.
    private static func makeFlow(state: FirmwareState, config: AgentConfig.Firmware) -> UpdateFlow {
        UpdateFlow(
            state: state, maximumFailedAttempts: config.downloadAttempts, allowDowngrade: config.allowDowngrade,
            confirmation: ConfirmPolicy(
                healthCheck: config.healthCheck != nil, healthAttempts: config.healthCheck?.attempts ?? 1, rollback: config.rollback != nil,
                timeout: config.confirmTimeout),
            gatedInstall: !config.installWindow.isEmpty || config.inhibitFile != nil,
            waitPolicy: WaitPolicy(
                retryInitial: config.retryInitial, retryMaximum: config.retryMaximum,
                healthInterval: config.healthCheck?.interval ?? .seconds(30)))
    }

    /// The state on disk; a damaged one is moved aside (with the staged image) for a fresh start.
    private static func loadState(_ store: FirmwareStore, logger: Logger) -> FirmwareState {
        do {
            return try store.loadState()
        } catch {
            logger.error("firmware state damaged: moved aside, starting afresh", metadata: ["reason": "\(error)"])
            store.quarantineState()
            store.discardImage()
            return FirmwareState()
        }
    }

    // MARK: - Poll

    private func poll() {
        if flow.phase == .installed || flow.phase == .confirming || flow.phase == .rollingBack {
            feed(.booted(version: commands.bootedVersion(), bootID: commands.bootID()))
        }
        if flow.phase == .confirming { perform(confirmTick()) }
        // Known: acted on, refused, or under way. A failed offer not remembered (a bad signature,
        // an expiry) is checked again.
        let answer = source.poll { [flow] digest in
            flow.state.remembers(digest) || (flow.state.update?.manifestDigest == digest && !flow.phase.isTerminal)
        }
        var result: String
        switch answer {
        case .unchanged:
            pollReachedServer = true
            result = lastVerdict.map { "unchanged: " + $0 } ?? "unchanged"
            synced()
        case .offer(let offer):
            pollReachedServer = true
            synced()
            result = consider(offer)
            lastVerdict = result
        case .nothing(let reason):
            result = reason
            pollReachedServer = true
            logger.notice("no firmware offered", metadata: ["reason": "\(reason)"])
        case .unreachable(let reason):
            result = reason
            pollReachedServer = false
            logger.warning("firmware manifest not fetched", metadata: ["reason": "\(reason)"])
        }
        control.withLock {
            $0.snapshot.lastCheck = .now()
            $0.snapshot.lastCheckResult = result
        }
        onChange()
    }

    private func synced() {
        if flow.phase == .confirming { feed(.synced) }
    }

    /// Accounts the confirmation time (boot time, across reboots of the new version) and sets
    /// the wake-up for the deadline.
    /// - Returns: what the flow asks for (a persist, or the rollback when the deadline passed).
    private func confirmTick() -> [UpdateEffect] {
        guard flow.phase == .confirming else { return [] }
        return flow.handle(.confirmClock(bootID: commands.bootID(), uptime: Self.bootTime()), now: WallTime.now())
    }

    /// `CLOCK_BOOTTIME`: time since boot, suspend included, never moved by the wall clock.
    static func bootTime() -> Duration {
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
    }

    /// An offer not seen before: checked against this device and offered to the flow.
    /// - Returns: what the check found, for the status.
    private func consider(_ offer: FirmwareOffer) -> String {
        let running = commands.bootedVersion()
        var manifest: FirmwareManifest?
        var refusal: FirmwareRefusal?
        do throws(FirmwareRefusal) {
            let parsed = try offer.manifest.get()
            manifest = parsed
            let now = WallTime.now()
            try UpdateDecision.check(
                parsed, deviceType: config.deviceType, highestAccepted: flow.state.highestAccepted.flatMap(SemanticVersion.init),
                allowDowngrade: config.allowDowngrade, now: now, clock: wallClock.verdict(now: now))
            if let current = flow.state.update, [.downloading, .verifying].contains(current.phase),
                let version = SemanticVersion(current.version), parsed.version <= version
            {
                // Only a higher version supersedes an update under way (a replayed older signed
                // manifest must not displace a newer release); judged afresh once it ended.
                throw FirmwareRefusal(
                    kind: .notNewer, message: "\(parsed.version) is not above \(version), the update under way: left alone")
            }
            logger.info(
                "firmware offered",
                metadata: ["version": "\(parsed.version)", "signedBy": "\(offer.vouchedBy ?? "")", "notes": "\(parsed.notes ?? "")"])
        } catch {
            if error.kind == .clockUntrusted {
                // Nothing is decided: the offer is read whole and judged again at the next poll.
                logger.warning("firmware waits for a trusted clock", metadata: ["reason": "\(error.message)"])
                source.checkAgain()
                return "waiting: \(error.message)"
            }
            if error.kind == .expired { source.checkAgain() }
            refusal = error
            logger.warning("firmware manifest refused", metadata: ["reason": "\(error)", "manifest": "\(offer.digest.prefix(16))"])
        }
        if refusal == nil { self.manifest = manifest }
        feed(.offered(digest: offer.digest, manifest: manifest, refusal: refusal, running: running))
        let current = flow.state.update.flatMap { $0.phase.isTerminal ? nil : $0.manifestDigest }
        source.forget(except: current)
        if let refusal, refusal.kind == .notNewer, let manifest, manifest.version == running {
            return "up to date (\(manifest.version) runs)"
        }
        if let refusal { return "refused: \(refusal)" }
        return "offered \(manifest.map { "\($0.version)" } ?? "")"
    }

    // MARK: - Download and verify

    // MARK: - Waits

    /// A gate holds `step`: the flow arms its timer and notes the reason; logged once per reason.
    /// - Parameter detail: more for the log line.
    /// - Returns: what the flow asks for.
    private func hold(_ step: UpdateEffect, reason: String, kind: GateKind, detail: Logger.Metadata = [:]) -> [UpdateEffect] {
        let before = waitReason
        let effects = flow.handle(.gateClosed(step: step, reason: reason, kind: kind), now: WallTime.now())
        if before != reason, waitReason == reason {
            var metadata: Logger.Metadata = ["for": "\(reason)", "step": "\(Self.describe(step))"]
            for (key, value) in detail { metadata[key] = value }
            logger.notice("firmware update waits", metadata: metadata)
        }
        return effects
    }

    /// The local time for a wait's log line, when an install window is configured.
    private var localTime: Logger.Metadata { config.installWindow.isEmpty ? [:] : ["localTime": "\(LocalTime.now())"] }

    /// The gate a step asked is open: a hold ends (logged).
    /// - Returns: what the flow asks for (a report that the wait is over).
    private func goOn() -> [UpdateEffect] {
        guard let reason = waitReason else { return flow.handle(.gateOpened, now: WallTime.now()) }
        logger.notice("firmware update goes on", metadata: ["waited for": "\(reason)"])
        let effects = flow.handle(.gateOpened, now: WallTime.now())
        // The status says so now, not once the step (a download, minutes long) ended; the
        // note's report and write follow it.
        publish()
        return effects
    }

    private static func describe(_ effect: UpdateEffect) -> String {
        switch effect {
        case .download: "download"
        case .installGate: "install"
        case .reboot: "reboot"
        default: "\(effect)"
        }
    }

    // MARK: - Reports

    /// Copies the flow's state into the snapshot.
    private func publish(notifying: Bool = true) {
        let update = flow.state.update
        let highest = flow.state.highestAccepted
        control.withLock {
            $0.snapshot.phase = update?.phase.rawValue ?? UpdatePhase.idle.rawValue
            $0.snapshot.version = update?.version
            $0.snapshot.fromVersion = update?.fromVersion
            $0.snapshot.size = update?.size ?? 0
            $0.snapshot.reason = update?.reason
            $0.snapshot.since = update?.since
            $0.snapshot.highestAccepted = highest
            $0.snapshot.waiting = waitReason
        }
        if notifying { onChange() }
    }
}

/// Sleeps the calling thread until `instant`.
func sleepUntil(_ instant: Instant) {
    let nanoseconds = instant.since(.now()).totalNanoseconds
    guard nanoseconds > 0 else { return }
    var request = timespec(tv_sec: .init(nanoseconds / 1_000_000_000), tv_nsec: .init(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0, errno == EINTR { request = remaining }
}
