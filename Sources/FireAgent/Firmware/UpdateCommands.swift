import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The device's side of a firmware update: the commands the config names (install, reboot,
/// commit, health check, rollback, version), the boot ID, and the gates an install or reboot
/// asks (`firmware.installWindow`, `firmware.inhibitFile`). Each command runs through
/// `CommandRunner` (no shell, its own process group, bounded output, a timeout) and is logged
/// with the end of its output. Used by the updater's thread only.
///
/// Memory: up to 64 KiB of a command's output at a time (4 KiB for the version command).
final class UpdateCommands {
    private let config: AgentConfig.Firmware
    private let store: FirmwareStore
    private let logger: Logger
    private let crashPoints: CrashPoints
    /// Why `firmware.inhibitFile` cannot be judged, as last logged (once per spell); nil while
    /// it can.
    private var inhibitProblem: String?

    /// The commands of `config`, on `store`'s image.
    init(config: AgentConfig.Firmware, store: FirmwareStore, logger: Logger, crashPoints: CrashPoints) {
        self.config = config
        self.store = store
        self.logger = logger
        self.crashPoints = crashPoints
    }

    /// Runs the install command on the verified image, once (the flow asks at most once per
    /// manifest), holding `install.lock` for it.
    func install(manifest: FirmwareManifest?) -> UpdateEvent {
        guard let manifest else {
            return .installerExited(success: false, rebootRequired: false, detail: "the manifest being acted on is missing or refused")
        }
        let argv = CommandRunner.expand(config.install, file: store.imagePath, version: manifest.version.description)
        logger.info("firmware installer starts", metadata: ["command": "\(argv.joined(separator: " "))"])
        let event: UpdateEvent
        let lock = store.lockForInstaller()
        defer { if let lock { close(lock) } }
        do {
            let result = try CommandRunner.run(argv, timeout: config.installTimeout, heldDescriptor: lock) { [crashPoints, logger] in
                crashPoints.exit(at: "installing", "while the installer runs", logger: logger)
            }
            log(result, of: "installer")
            let rebootCode = config.rebootExitCode.map { Int32($0) }
            let success = !result.timedOut && (result.exitCode == 0 || (rebootCode != nil && result.exitCode == rebootCode))
            let reboot = config.rebootRequired || (rebootCode != nil && result.exitCode == rebootCode)
            event = .installerExited(success: success, rebootRequired: reboot, detail: describe(result))
        } catch {
            event = .installerExited(success: false, rebootRequired: false, detail: error.description)
        }
        crashPoints.exit(at: "installer-exited", "after the installer, before recording its outcome", logger: logger)
        return event
    }

    /// Runs the reboot command (into the new version, or the old one while `phase` is
    /// `rollingBack`); without one, says that the device waits for a reboot.
    func reboot(phase: UpdatePhase) {
        let into = phase == .rollingBack ? "the old version" : "the new version"
        guard let argv = config.reboot else {
            logger.info("firmware \(phase.rawValue): waiting for a reboot into \(into)")
            return
        }
        logger.info("firmware \(phase.rawValue): rebooting into \(into)", metadata: ["command": "\(argv.joined(separator: " "))"])
        do {
            log(try CommandRunner.run(argv, timeout: config.commandTimeout), of: "reboot command")
        } catch {
            logger.error("firmware reboot command failed: waiting for a reboot", metadata: ["reason": "\(error)"])
        }
    }

    /// Runs the commit command (none configured: a success).
    func commit() -> UpdateEvent {
        guard let argv = config.commit else { return .commitExited(success: true, detail: "no commit command") }
        logger.info("firmware commit starts", metadata: ["command": "\(argv.joined(separator: " "))"])
        do {
            let result = try CommandRunner.run(argv, timeout: config.commandTimeout)
            log(result, of: "commit command")
            return .commitExited(success: result.succeeded, detail: describe(result))
        } catch {
            return .commitExited(success: false, detail: error.description)
        }
    }

    /// Why an install or a reboot into the new version may not start now, or nil.
    func installGateReason() -> String? {
        if !config.installWindow.isEmpty {
            let now = LocalTime.now()
            if !config.installWindow.contains(where: { $0.contains(weekday: now.weekday, minute: now.minute) }) {
                let list = config.installWindow.map { $0.description }.joined(separator: ", ")
                // Not the local time: the reason is the update's note, reported and written
                // when it changes (the log line says the time, once).
                return "outside firmware.installWindow (\(list))"
            }
        }
        return inhibitReason()
    }

    /// Why no reboot may start now (the application's lock, or a lock file the agent cannot
    /// judge: it fails closed), or nil.
    func inhibitReason() -> String? {
        guard let file = config.inhibitFile else { return nil }
        switch InhibitLock.state(file) {
        case .free:
            inhibitProblem = nil
            return nil
        case .held:
            inhibitProblem = nil
            return "\(file) is locked by the application (firmware.inhibitFile)"
        case .unusable(let why):
            if inhibitProblem != why {
                logger.warning(
                    "firmware.inhibitFile cannot be judged: installs and reboots wait as if it were locked (logged once until it changes)",
                    metadata: ["file": "\(file)", "reason": "\(why)"])
            }
            inhibitProblem = why
            return "\(file) \(why): firmware.inhibitFile is taken as locked until the agent can tell"
        }
    }

    /// One attempt of the health check.
    /// - Parameters:
    ///   - version: the version being confirmed.
    ///   - attempt: its number, from 1 (for the log).
    func healthCheck(version: String, attempt: Int) -> UpdateEvent {
        guard let check = config.healthCheck else { return .healthChecked(passed: true, detail: "no health check configured") }
        let argv = CommandRunner.expand(check.command, file: store.imagePath, version: version)
        logger.info(
            "firmware health check starts", metadata: ["command": "\(argv.joined(separator: " "))", "attempt": "\(attempt)"])
        do {
            let result = try CommandRunner.run(argv, timeout: check.timeout) { [crashPoints, logger] in
                crashPoints.exit(at: "health-check", "while the health check runs", logger: logger)
            }
            log(result, of: "health check")
            return .healthChecked(passed: result.succeeded, detail: describe(result))
        } catch {
            logger.error("firmware health check cannot run", metadata: ["reason": "\(error)"])
            return .healthChecked(passed: false, detail: error.description)
        }
    }

    /// The rollback command, once (`rollbackStarts()` is on disk already).
    /// - Parameter version: the version that failed its confirmation.
    func rollback(version: String) -> UpdateEvent {
        guard let argv = config.rollback else { return .rollbackExited(success: false, detail: "no rollback command") }
        let expanded = CommandRunner.expand(argv, file: store.imagePath, version: version)
        logger.warning("firmware rollback starts", metadata: ["command": "\(expanded.joined(separator: " "))"])
        let event: UpdateEvent
        do {
            let result = try CommandRunner.run(expanded, timeout: config.commandTimeout) { [crashPoints, logger] in
                crashPoints.exit(at: "rollback-running", "while the rollback command runs", logger: logger)
            }
            log(result, of: "rollback command")
            event = .rollbackExited(success: result.succeeded, detail: describe(result))
        } catch {
            event = .rollbackExited(success: false, detail: error.description)
        }
        crashPoints.exit(at: "rollback-exited", "after the rollback command, before recording its outcome", logger: logger)
        return event
    }

    private func log(_ result: CommandResult, of name: String) {
        let text = result.outputText
        let metadata: Logger.Metadata = ["result": "\(result.summary)", "output": "\(text.suffix(4096))"]
        if result.succeeded {
            logger.info("firmware \(name) ended", metadata: metadata)
        } else {
            logger.error("firmware \(name) failed", metadata: metadata)
        }
    }

    private func describe(_ result: CommandResult) -> String {
        let last = result.outputText.split(separator: "\n").last.map { ": " + $0.prefix(200) } ?? ""
        return result.summary + last
    }

    /// The booted version: the first line of `versionFile` or of `versionCommand`'s output.
    func bootedVersion() -> SemanticVersion? {
        var text: String?
        if let file = config.versionFile {
            text = SystemFiles().read(file, limit: 4096)
        } else if let argv = config.versionCommand,
            let result = try? CommandRunner.run(argv, timeout: config.commandTimeout, outputLimit: 4096),
            result.succeeded
        {
            text = String(decoding: result.output, as: UTF8.self)
        }
        let line = text?.split(whereSeparator: { $0.isNewline }).first.map { String($0).trimmed() }
        let version = line.flatMap(SemanticVersion.init)
        if version == nil { logger.warning("the booted version cannot be read", metadata: ["found": "\(line ?? "nothing")"]) }
        return version
    }

    /// This boot's ID (`firmware.bootIDFile`).
    func bootID() -> String? {
        SystemFiles().read(config.bootIDFile, limit: 256)?.trimmed()
    }
}
