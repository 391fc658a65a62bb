import FireAgentBase
import TinyFire

extension FirmwareUpdater: DaemonFirmware {}

extension FirmwareUpdater {
    /// The daemon's firmware maker in the host build: a `FirmwareUpdater` for a config with a
    /// firmware section.
    /// - Parameter options: the daemon's (environment, reachability).
    public static func daemonMaker(_ options: AgentDaemon.Options) -> AgentDaemon.FirmwareMaker {
        let environment = options.environment
        let namespace = options.reachabilityNamespace
        let watch = options.watchReachability
        return { config, logger, clock, changed throws(AgentError) in
            guard let firmware = config.firmware else { return nil }
            // The report queue (the library's `OfflineQueue`) wakes when the route to the
            // server returns; until firmware runs on the core's queue, it watches that route
            // itself.
            let reachability =
                watch
                ? try? NetworkReachabilityManager(
                    host: namespace == nil ? config.network.routeHost(for: config.server.url) : nil, networkNamespace: namespace,
                    logger: logger.swiftLogger)
                : nil
            return try FirmwareUpdater(
                config: firmware, agentConfig: config, logger: logger, reachability: reachability, environment: environment,
                wallClock: clock, onChange: changed)
        }
    }
}

extension AgentDaemon.Options {
    /// The host build's options: uploads say what the library's requests say.
    public static var host: AgentDaemon.Options {
        var options = AgentDaemon.Options()
        options.userAgent = HTTPHeader.defaultUserAgent.value
        return options
    }
}

extension AgentDaemon {
    /// The host build's daemon: `AgentDaemon` with firmware updates by `FirmwareUpdater`.
    /// - Parameters:
    ///   - configPath: the file reloads read again.
    ///   - config: its checked contents.
    ///   - options: how it is hosted (default `.host`: uploads with the library's `User-Agent`).
    ///   - makeLogger: a logger for a config's `logging` section (called again at reload).
    /// - Throws: `AgentError` when the agent cannot start (queue locked or unusable, TLS).
    public convenience init(
        configPath: String, config: AgentConfig, options: Options = .host,
        makeLogger: @escaping @Sendable (AgentConfig.Logging) -> Logger
    ) throws(AgentError) {
        try self.init(
            configPath: configPath, config: config, options: options, makeFirmware: FirmwareUpdater.daemonMaker(options),
            makeLogger: makeLogger)
    }
}
