import CTinyFireSystem
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `fire-agent run`: the agent as a long-running service, on the core alone (it is built
/// normally for the host and in Embedded Swift for boards). One thread runs a loop that sleeps
/// in `poll(2)` until the `DaemonSchedule` says something is due, a command or signal arrives or
/// the kernel's routing changes, so an idle agent costs one wake-up per due job and nothing in
/// between. Every network client runs on one event loop (thread `fire-agent-io`): the
/// telemetry engine and queue, the firmware client and its report queue. The firmware updater
/// has a thread of its own (`fire-agent-fw`). Three threads in all.
///
/// - Collection and sync follow the schedule (jittered sync); the offline queue delivers in
///   the background, driven by reachability (it waits while the route to the server is down
///   and sends at once when it returns; the daemon then queues what it holds at once too).
/// - Reachability: the loop watches rtnetlink events for links, addresses and routes itself
///   (the core's `RouteWatch`: a burst gathered for 50 ms, then the route to the server, or the
///   proxy, judged by `RouteJudge`).
/// - SIGTERM or SIGINT (or `stop()`): pending points and the spool are queued durably, the
///   delivery in flight gets up to `daemon.stopTimeout` to finish (a batch it does not finish
///   stays queued and is sent again), the queue is closed, the status says `stopped`.
/// - SIGHUP (or `reload()`): the config file is read again; a file with any problem is refused
///   with the reason logged and in the status, and the running config is kept.
/// - systemd: `READY=1` once running, `WATCHDOG=1` every half `WatchdogSec` from the loop
///   itself (a stuck loop gets the service restarted), `RELOADING=1` and `STOPPING=1`.
/// - `daemon.statusFile` is rewritten (atomically) after each change, at most once a second.
///
/// Memory: the agent's (`TelemetryAgent`: one pending batch, the queue's index, an engine), a
/// netlink socket's 32 KiB buffer and a 256 KiB kernel buffer while reachability is watched,
/// plus the status document; nothing grows with uptime.
package final class AgentDaemon: @unchecked Sendable {
    // @unchecked: everything mutable below is touched only by the thread in `run()`; other
    // threads talk to it through `mailbox` (a lock and the wake pipe).

    /// The kernel receive buffer of the netlink event socket: 256 KiB. Overruns trigger a
    /// full re-read.
    package static let routeEventBuffer: Int32 = 256 * 1024

    /// How the daemon is hosted.
    package struct Options: Sendable {
        /// Turn SIGTERM, SIGINT and SIGHUP into stop and reload (the command does; in-process
        /// tests call `stop()` and `reload()` instead).
        package var handleSignals = true
        /// The environment (`NOTIFY_SOCKET`, `WATCHDOG_USEC`).
        package var environment: [String: String] = ProcessEnvironment.current()
        /// Where /proc and /sys are.
        package var files = SystemFiles()
        /// The version the status reports.
        package var version = HTTPHeaders.tinyFireVersion
        /// The `User-Agent` of uploads; nil: `TelemetryAgent`'s (`fire-agent TinyFire/VERSION`).
        package var userAgent: String?
        /// Watch the route to the server (netlink). Off where netlink is missing.
        package var watchReachability = true
        /// Judge reachability by the default route of this network namespace
        /// (`/run/netns/NAME`) instead of the route to the server in the process's own (tests
        /// take the route away and give it back there).
        package var reachabilityNamespace: String?

        /// Default options.
        package init() {}
    }

    private let configPath: String
    private let options: Options
    private let makeLogger: @Sendable (AgentConfig.Logging) -> Logger
    private let notifier: SystemdNotifier?
    private let mailbox: DaemonMailbox
    /// The signal pipe's read end, or -1 when signals are not handled.
    private let signalFD: Int32
    private let origin = Instant.now()
    /// Whether the last systemd notification was dropped (loop-confined).
    private var notificationDropped = false

    private var config: AgentConfig
    private var logger: Logger
    /// The one event loop (thread `fire-agent-io`) that every network client of the daemon runs
    /// on: the telemetry engine and queue, the firmware client and its report queue. Kept
    /// across reloads; stopped once the clients ended.
    private let loop: EventLoop
    private var agent: TelemetryAgent
    /// Where the updater's points go: the telemetry queue of `agent` (attached anew at reload).
    private let points: AgentPoints
    /// Firmware updates, when configured: a thread of their own.
    private var updater: FirmwareUpdater?
    /// Why the configured firmware updater does not run, and when it is tried again.
    private var updaterProblem: (reason: String, retryAt: Duration)?
    /// The route to the server, watched; nil when reachability is not watched.
    private var routes: RouteWatch?
    private var schedule: DaemonSchedule
    private var status: AgentStatus
    private var statusDirty = true
    private var lastStatusWrite: Duration?
    private var statusWriteFailed = false
    /// Points collected since the last sync (for its status line).
    private var collectedSinceSync = 0

    /// Opens the agent (queue, session) for `config`.
    /// - Parameters:
    ///   - configPath: the file reloads read again.
    ///   - config: its checked contents.
    ///   - options: how it is hosted.
    ///   - makeLogger: a logger for a config's `logging` section (called again at reload).
    /// - Throws: `AgentError` when the agent cannot start (queue locked or unusable, TLS).
    package init(
        configPath: String, config: AgentConfig, options: Options = Options(),
        makeLogger: @escaping @Sendable (AgentConfig.Logging) -> Logger
    ) throws(AgentError) {
        // Signals first: a SIGTERM while the queue is being opened is handled once running.
        var signalFD: Int32 = -1
        if options.handleSignals {
            let signals: [Int32] = [SIGTERM, SIGINT, SIGHUP]
            signalFD = signals.withUnsafeBufferPointer { tinyfire_signal_pipe($0.baseAddress, Int32($0.count)) }
            if signalFD < 0 { throw AgentError(description: "cannot install signal handlers: \(errnoMessage(-signalFD))") }
        }
        self.signalFD = signalFD
        self.configPath = configPath
        self.options = options
        self.makeLogger = makeLogger
        self.config = config
        logger = makeLogger(config.logging)
        notifier = SystemdNotifier(environment: options.environment)
        mailbox = try DaemonMailbox()
        points = AgentPoints(logger: logger)
        let now = WallTime.now()
        schedule = DaemonSchedule(
            collectEvery: config.telemetry.interval, syncEvery: config.telemetry.syncInterval, jitter: config.telemetry.jitter,
            watchdogInterval: notifier?.watchdogInterval, now: .zero, random: Double.random(in: 0...1))
        status = AgentStatus(
            state: "starting", pid: getpid(), version: options.version, startedAt: now, updatedAt: now, configFile: configPath,
            configLoadedAt: now, reachability: "unknown",
            queue: AgentStatus.Queue(
                records: 0, bytes: 0, delivered: 0, dropped: 0, rejected: 0, discarded: 0, quarantined: 0, headFailures: 0),
            deadLetters: 0, rejectedSpoolLines: 0, stoppedCollectors: [:])
        routes = options.watchReachability ? Self.watch(config, namespace: options.reachabilityNamespace, logger: logger) : nil
        do throws(SystemResourceError) {
            loop = try EventLoop(name: "fire-agent-io")
        } catch {
            throw AgentError(description: "cannot start the network thread: \(error.description)")
        }
        do throws(AgentError) {
            agent = try Self.openAgent(config, logger: logger, options: options, loop: loop)
        } catch {
            loop.shutdown()
            throw error
        }
        startUpdater(config, logger: logger)
    }

    deinit {
        // A daemon that never ran (or whose run ended) leaves no thread behind.
        loop.shutdown()
    }

    /// Creates the firmware updater when the config has a firmware section. When its directory
    /// cannot be used (read-only, full, created by someone else), telemetry runs all the same:
    /// firmware updates are off, the status says why, and the next sync after
    /// `updaterRetryInterval` tries again.
    /// - Returns: whether an updater runs (or none is configured).
    @discardableResult
    private func startUpdater(_ config: AgentConfig, logger: Logger) -> Bool {
        do throws(AgentError) {
            updater = try makeUpdater(config, logger: logger)
            if updaterProblem != nil { logger.notice("firmware updates on again") }
            updaterProblem = nil
            return true
        } catch {
            updater = nil
            if updaterProblem?.reason != error.description {
                logger.error(
                    "firmware updates are off; telemetry goes on, and the firmware section is tried again",
                    metadata: ["reason": "\(error)", "every": "\(ConfigReader.describe(Self.updaterRetryInterval))"])
            }
            updaterProblem = (error.description, elapsed() + Self.updaterRetryInterval)
            return false
        }
    }

    /// How often a firmware section that could not start is tried again.
    static let updaterRetryInterval: Duration = .seconds(30)

    private func makeUpdater(_ config: AgentConfig, logger: Logger) throws(AgentError) -> FirmwareUpdater? {
        guard let firmware = config.firmware else { return nil }
        let mailbox = mailbox
        return try FirmwareUpdater(
            config: firmware, agentConfig: config, logger: logger, environment: options.environment, wallClock: agent.clock,
            points: points, server: agent.server, loop: loop
        ) { mailbox.post(.changed) }
    }

    /// Asks the loop to stop (as SIGTERM does); `run()` returns once the work is persisted.
    package func stop() { mailbox.post(.stop) }

    /// Asks the loop to read the config file again (as SIGHUP does).
    package func reload() { mailbox.post(.reload) }

    // MARK: - The loop

    /// Runs until stopped. Returns after the queue is closed and the status says `stopped`.
    /// - Throws: `AgentError` when a reload could bring up neither the new nor the old config.
    package func run() throws(AgentError) {
        attach(agent)
        judgeRoutes()
        startDelivery()
        updater?.start(network: currentNetwork)
        status.state = "running"
        writeStatus(now: elapsed())
        logger.info(
            "fire-agent running",
            metadata: [
                "config": "\(configPath)", "server": "\(config.server.url)",
                "interval": "\(ConfigReader.describe(config.telemetry.interval))",
                "syncInterval": "\(ConfigReader.describe(config.telemetry.syncInterval))",
            ])
        notified(notifier?.ready(status: "running"), "READY=1")

        while true {
            let now = elapsed()
            for job in schedule.due(at: now, random: Double.random(in: 0...1)) {
                switch job {
                case .collect: collectedSinceSync += agent.collect()
                case .sync: sync()
                case .watchdog: notified(notifier?.watchdog(), "WATCHDOG=1")
                }
            }
            judgeRoutes()
            if statusDirty, lastStatusWrite.map({ now - $0 >= .seconds(1) }) ?? true { writeStatus(now: now) }
            var deadline = schedule.nextDeadline
            if statusDirty, let last = lastStatusWrite { deadline = min(deadline, last + .seconds(1)) }
            if let due = routes?.checkAt { deadline = min(deadline, due.since(origin)) }
            wait(until: deadline)
            for command in mailbox.take() {
                switch command {
                case .stop:
                    shutdown()
                    return
                case .reload: try reloadConfig()
                case .changed: statusDirty = true
                case .routesMoved: routes?.scheduleCheck()
                }
            }
        }
    }

    /// Sleeps in poll(2) until `deadline` or a wake-up (a command, a signal, a netlink event).
    private func wait(until deadline: Duration) {
        let remaining = max(deadline - elapsed(), .zero)
        let milliseconds = Int32(clamping: (remaining.totalNanoseconds + 999_999) / 1_000_000)
        var fds = [
            pollfd(fd: mailbox.readEnd, events: Int16(POLLIN), revents: 0), pollfd(fd: signalFD, events: Int16(POLLIN), revents: 0),
            pollfd(fd: routes?.descriptor ?? -1, events: Int16(POLLIN), revents: 0),
        ]
        _ = poll(&fds, nfds_t(fds.count), milliseconds)  // negative descriptors are not polled
        mailbox.drain()
        if fds[2].revents != 0, let note = routes?.readEvents() { logger.notice("reachability: \(note)") }
        guard signalFD >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let count = read(signalFD, &buffer, buffer.count)
            guard count > 0 else { break }
            for index in 0..<count {
                mailbox.post(Int32(buffer[index]) == SIGHUP ? .reload : .stop, wake: false)
            }
        }
    }

    private func elapsed() -> Duration { Instant.now().since(origin) }

    /// How long one sync takes the spool at most: a quarter of the watchdog's interval under
    /// systemd, and never more than `maxSpoolSlice`.
    private var spoolSlice: Duration {
        guard let every = schedule.watchdogEvery else { return Self.maxSpoolSlice }
        return min(Self.maxSpoolSlice, max(every / 2, .milliseconds(100)))
    }

    /// The longest one sync takes the spool (the loop then answers signals and goes on).
    static let maxSpoolSlice: Duration = .seconds(2)

    // MARK: - Jobs

    private func sync() {
        if let problem = updaterProblem, elapsed() >= problem.retryAt, startUpdater(config, logger: logger) {
            updater?.start(network: currentNetwork)
            statusDirty = true
        }
        var report = SyncReport()
        report.collectedPoints = collectedSinceSync
        collectedSinceSync = 0
        // A long spool is taken a slice at a time: the loop answers the watchdog and signals
        // between two, and the next slice follows at once.
        agent.queuePending(into: &report, spoolDeadline: spoolSlice)
        if report.spoolYielded { schedule.routeReturned(at: elapsed()) }
        if let problem = agent.clock.remember() {
            logger.warning("clock floor not saved", metadata: ["reason": "\(problem)"])
        }
        status.lastSync = AgentStatus.Sync(
            at: .now(), collectedPoints: report.collectedPoints, spooledLines: report.spooledLines, rejectedLines: report.rejectedLines,
            queuedBatches: report.queuedBatches, error: report.failure)
        statusDirty = true
        logger.debug(
            "sync",
            metadata: ["queued": "\(report.queuedBatches)", "spooled": "\(report.spooledLines)", "rejected": "\(report.rejectedLines)"])
    }

    private func shutdown() {
        logger.info("stopping: queueing what is pending")
        notified(notifier?.stopping(status: "stopping"), "STOPPING=1")
        status.state = "stopping"
        writeStatus(now: elapsed())
        if let updater, !updater.stop(timeout: config.daemon.stopTimeout) {
            logger.warning(
                "the firmware updater was still busy (an installer, or a request to the update server); its state resumes after restart")
        }
        if !handOver(agent) {
            logger.warning(
                "a delivery was still in flight after daemon.stopTimeout; its batch stays queued and is sent again after restart",
                metadata: ["stopTimeout": "\(ConfigReader.describe(config.daemon.stopTimeout))"])
        }
        routes = nil
        status.state = "stopped"
        writeStatus(now: elapsed())
        logger.info("stopped", metadata: ["queued": "\(agent.queueFigures.records)"])
    }

    /// Ends `agent` before a stop or a reload: what it holds is queued, its delivery gets up to
    /// `stopTimeout` to come to rest, its queue is closed.
    /// - Returns: whether delivery came to rest in time.
    private func handOver(_ agent: TelemetryAgent) -> Bool {
        points.attach(nil)  // points made meanwhile wait for the next agent (or end with the process)
        var report = SyncReport()
        agent.queuePending(into: &report, spoolDeadline: spoolSlice)
        defer { agent.close() }
        let idle = WakeSignal()
        agent.stopDelivery { idle.signal() }
        return idle.wait(timeout: config.daemon.stopTimeout)
    }

    private func reloadConfig() throws(AgentError) {
        notified(notifier?.reloading(), "RELOADING=1")
        logger.info("reloading the config", metadata: ["file": "\(configPath)"])
        let fresh: AgentConfig
        do throws(ConfigError) {
            fresh = try AgentConfig.load(path: configPath)
        } catch {
            refuseReload(error.description)
            return
        }
        _ = handOver(agent)
        let freshLogger = makeLogger(fresh.logging)
        let sameRoute = Self.routeHost(fresh) == Self.routeHost(config)
        do throws(AgentError) {
            agent = try Self.openAgent(fresh, logger: freshLogger, options: options, loop: loop)
        } catch {
            // The new file is valid but cannot run (e.g. its queue directory is unusable).
            do throws(AgentError) {
                agent = try Self.openAgent(config, logger: logger, options: options, loop: loop)
            } catch {
                throw AgentError(description: "reload failed and the running config could not be restored: \(error.description)")
            }
            attach(agent)
            startDelivery()
            refuseReload(error.description)
            return
        }
        if !sameRoute {
            routes =
                options.watchReachability ? Self.watch(fresh, namespace: options.reachabilityNamespace, logger: freshLogger) : nil
            judgeRoutes()
        }
        config = fresh
        logger = freshLogger
        attach(agent)
        startDelivery()
        if let running = updater, !running.stop(timeout: fresh.daemon.stopTimeout) {
            // An installer runs: the updater finishes that step with the old section (two
            // updaters must never share the state directory); the new one takes over at the
            // next reload or restart.
            logger.warning(
                "firmware section not reloaded: the updater is busy (an install, or a request to the update server); reload again once it ended"
            )
        } else {
            updaterProblem = nil
            if startUpdater(fresh, logger: freshLogger) { updater?.start(network: currentNetwork) }
        }
        schedule.reconfigure(
            collectEvery: fresh.telemetry.interval, syncEvery: fresh.telemetry.syncInterval, jitter: fresh.telemetry.jitter, now: elapsed())
        status.configLoadedAt = WallTime.now()
        status.reloadError = nil
        statusDirty = true
        logger.info("config reloaded", metadata: ["file": "\(configPath)"])
        notified(notifier?.ready(status: "running"), "READY=1")
    }

    /// Logs, once per spell, that systemd's notification socket took nothing: a watchdog
    /// ping that finds its queue full is dropped, a state message after a second, one to a
    /// socket that is gone at once (see `SystemdNotifier.notify`), and the loop goes on
    /// collecting and delivering.
    private func notified(_ sent: Bool?, _ message: String) {
        guard let sent else { return }
        defer { notificationDropped = !sent }
        guard !sent, !notificationDropped else { return }
        logger.warning(
            "systemd's notification socket takes no messages (its queue is full, or it is gone): they are dropped until it takes them again",
            metadata: ["dropped": "\(message)"])
    }

    private func refuseReload(_ reason: String) {
        logger.error("config reload refused; the running config is kept", metadata: ["reason": "\(reason)"])
        status.reloadError = reason
        statusDirty = true
        notified(notifier?.ready(status: "running (reload refused)"), "READY=1")
    }

    /// Opens the telemetry agent (queue, engine) for `config`, on `loop`, with the fleet server
    /// set up once for the config: the firmware updater takes the agent's (`makeUpdater`).
    private static func openAgent(_ config: AgentConfig, logger: Logger, options: Options, loop: EventLoop) throws(AgentError)
        -> TelemetryAgent
    {
        let server = try FleetServer(config: config, userAgent: options.userAgent ?? FleetServer.defaultUserAgent)
        return try TelemetryAgent(config: config, logger: logger, files: options.files, server: server, loop: loop)
    }

    /// Starts the agent's background delivery with what reachability knows now (nothing is
    /// sent while it says the route is down).
    private func startDelivery() {
        agent.startDelivery(network: currentNetwork)
    }

    /// What reachability last said, as delivery takes it.
    private var currentNetwork: OfflineQueueReplay.Network {
        switch routes?.status {
        case .reachable?: return .reachable
        case .notReachable?: return .notReachable
        case .unknown?, nil: return .unknown
        }
    }

    /// Delivery events and spool rejections wake the loop to refresh the status.
    private func attach(_ agent: TelemetryAgent) {
        points.attach(agent)
        let mailbox = mailbox
        agent.tracker.onChange { mailbox.post(.changed) }
    }

    // MARK: - Reachability

    /// The host whose route counts: the server's, or the proxy's when one is used.
    private static func routeHost(_ config: AgentConfig) -> String? {
        config.network.routeHost(for: config.server.url)
    }

    /// Watches the route to the server (through a proxy, to the proxy), or nil with the reason
    /// logged when netlink cannot be used.
    private static func watch(_ config: AgentConfig, namespace: String?, logger: Logger) -> RouteWatch? {
        do throws(NetworkReachabilityError) {
            // In a namespace (tests), its default route is what counts.
            let judge = try RouteJudge(host: namespace == nil ? routeHost(config) : nil, networkNamespace: namespace)
            return try RouteWatch(judge: judge, receiveBuffer: routeEventBuffer)
        } catch {
            logger.notice("reachability is not watched (deliveries retry on their backoff alone)", metadata: ["reason": "\(error)"])
            return nil
        }
    }

    /// Judges the route when a check is due and acts on a change: the route back means a sync
    /// at once, a firmware poll and delivery; any other change is told to delivery and to the
    /// updater's waits.
    private func judgeRoutes() {
        guard let routes else { return }
        let previous = routes.status
        let mailbox = mailbox
        let (changed, failure) = routes.checkIfDue { mailbox.post(.routesMoved) }
        if let failure { logger.error("reachability: \(failure)") }
        guard let update = changed else { return }
        logger.debug("reachability: \(update)")
        agent.network(currentNetwork)
        updater?.network(currentNetwork)
        if update.isReachable, let previous, !previous.isReachable {
            logger.info("route to the server is back: syncing now")
            schedule.routeReturned(at: elapsed())
            updater?.pollNow()
        }
        // Another interface, say: a download that waits for a link may go.
        updater?.recheckWaits()
        statusDirty = true
    }

    // MARK: - Status

    private func writeStatus(now: Duration) {
        let delivery = agent.tracker.snapshot
        status.updatedAt = WallTime.now()
        // The next sync rewrites it; twice its longest interval and 5 s more is the promise.
        let syncEvery = Double(config.telemetry.syncInterval.totalNanoseconds) / 1e9 * (1 + config.telemetry.jitter)
        status.nextUpdateBy = status.state == "stopped" ? nil : status.updatedAt.adding(.seconds(2 * syncEvery + 5))
        status.reachability = routes.map { ($0.status ?? .unknown).description } ?? "not watched"
        let verdict = agent.clock.verdict()
        status.clock = verdict.isTrusted ? "trusted" : verdict.reason
        status.queue = agent.queueFigures
        status.lastDelivery = delivery.lastDelivery
        status.lastSuccessfulDelivery = delivery.lastSuccess ?? status.lastSuccessfulDelivery
        status.deadLetters = delivery.deadLetters
        status.rejectedSpoolLines = delivery.rejectedSpoolLines
        status.stoppedCollectors = agent.stoppedCollectors
        if let problem = updaterProblem {
            var firmware = AgentStatus.Firmware(phase: "unavailable")
            firmware.reason = problem.reason
            status.firmware = firmware
        } else {
            status.firmware = updater?.snapshot
        }
        statusDirty = false
        lastStatusWrite = now
        do throws(AgentError) {
            try status.write(to: config.daemon.statusFile)
            statusWriteFailed = false
        } catch {
            if !statusWriteFailed {
                logger.error("status not written (fire-agent status cannot see this daemon)", metadata: ["reason": "\(error)"])
            }
            statusWriteFailed = true
        }
    }
}

/// What other threads and signal handlers hand the daemon's loop: commands behind a lock, and a
/// non-blocking pipe whose byte wakes the loop's poll(2). Owned by the daemon and captured by
/// the callbacks it installs (delivery, the updater, DNS), which never hold the daemon itself.
///
/// Memory: the commands not taken yet (each wake-up takes them all).
final class DaemonMailbox: Sendable {
    enum Command: Sendable { case stop, reload, changed, routesMoved }

    private let commands = Locked<[Command]>([])
    /// The pipe's read end, for poll(2).
    let readEnd: Int32
    private let writeEnd: Int32

    init() throws(AgentError) {
        var fds: [Int32] = [-1, -1]
        guard tinyfire_pipe_cloexec(&fds) == 0 else {
            throw AgentError(description: "cannot make the daemon's wake-up pipe: \(errnoMessage(errno))")
        }
        readEnd = fds[0]
        writeEnd = fds[1]
        _ = fcntl(readEnd, F_SETFL, O_NONBLOCK)
        _ = fcntl(writeEnd, F_SETFL, O_NONBLOCK)
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Queues `command` and wakes the loop (unless the caller is the loop).
    func post(_ command: Command, wake: Bool = true) {
        commands.withLock { $0.append(command) }
        guard wake else { return }
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)  // a full pipe already holds a wake-up
    }

    /// Empties the pipe after a wake-up.
    func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(readEnd, &buffer, buffer.count) > 0 {}
    }

    /// The commands posted since the last call, in order.
    func take() -> [Command] {
        commands.withLock { commands in
            defer { commands = [] }
            return commands
        }
    }
}
