import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// fire-agent's command line, for both builds (the full-Swift one and the Embedded one for
/// boards): every command — `request`, `run`, `sync --once`, `status`, `config check` and
/// `show`, `reachability`, `queue list`, `stats`, `add` and `flush`, `firmware update --once`
/// and `firmware verify` — with its options, help pages (`HelpPages.swift`), usage errors and
/// exit statuses (docs/CLI.md), parsed as swift-argument-parser did before (which Embedded
/// Swift cannot build). The program's entry point (Sources/fire-agent/main.swift) runs it.
///
/// Memory: the arguments and what each command holds (`TelemetryAgent`, one status document).
package enum AgentCommandLine {
    /// fire-agent's version line (`--version`).
    package static let version = "fire-agent \(HTTPHeaders.tinyFireVersion) (TinyFire \(HTTPHeaders.tinyFireVersion))"

    /// Exit statuses, as the host binary's (curl's and sysexits' numbers).
    package enum Exit {
        /// Done.
        package static let success: Int32 = 0
        /// The command line is wrong (swift-argument-parser's status for a usage error).
        package static let usage: Int32 = 64
        /// `status`: no daemon runs with this config.
        package static let notRunning: Int32 = 69
        /// Not done yet, but durable (`sync`: batches still queued; `status`: stale).
        package static let deferred: Int32 = 75
        /// The config file has problems.
        package static let configError: Int32 = 78
        /// The agent's own files could not be written (its queue).
        package static let writeError: Int32 = 23
        /// A file or directory the command reads cannot be used (`queue list` and `stats`).
        package static let readError: Int32 = 26
        /// `run`: a reload could bring up neither the new nor the old config.
        package static let internalError: Int32 = 99
        /// `firmware verify`: the manifest, its signature or the image is refused.
        package static let refused: Int32 = 65
        /// `firmware update --once`: installed; the new version runs after the reboot.
        package static let installed: Int32 = 10
        /// `firmware update --once`: the new version was committed.
        package static let committed: Int32 = 11
        /// `firmware update --once`: the offer was refused.
        package static let offerRefused: Int32 = 12
        /// `firmware update --once`: the update failed.
        package static let updateFailed: Int32 = 13
        /// `firmware update --once`: the new version was rolled back.
        package static let rolledBack: Int32 = 14
        /// `firmware update --once`: another fire-agent runs the firmware flow.
        package static let busy: Int32 = 16

        /// What `firmware update --once` exits with for `outcome`.
        package static func code(_ outcome: FirmwareUpdater.CycleOutcome) -> Int32 {
            switch outcome {
            case .upToDate: success
            case .installed: installed
            case .committed: committed
            case .refused: offerRefused
            case .failed: updateFailed
            case .rolledBack: rolledBack
            case .deferred: deferred
            }
        }
    }

    /// Runs the command `arguments` name (without the program's name) and returns the exit
    /// status.
    package static func run(_ arguments: [String]) -> Int32 {
        guard let first = arguments.first else { return help("") }
        let rest = Array(arguments.dropFirst())
        switch first {
        case "--version": return say(version)
        case "-h", "--help": return help("")
        case "help":
            // `fire-agent help queue add`: the page of the command the words name.
            let words = rest.joined(separator: " ")
            guard helpPage(words) != nil else {
                return usageError("Unexpected argument '\(rest.first ?? "")'", Command(name: "", usage: "<subcommand>"))
            }
            return help(words)
        case "request": return parsed(rest, requestCommand, request)
        case "run":
            return parsed(rest, Command.run) { arguments in
                runDaemon(configPath: arguments.options["--config"] ?? AgentConfig.defaultPath)
            }
        case "sync": return parsed(rest, Command.sync, sync)
        case "status": return parsed(rest, Command.status, status)
        case "queue":
            switch rest.first {
            case "list":
                return parsed(Array(rest.dropFirst()), Command.queueList) { arguments in
                    queueList(directory: arguments.options["--dir"] ?? "", limit: arguments.options["--limit"].flatMap { Int($0) } ?? .max)
                }
            case "stats":
                return parsed(Array(rest.dropFirst()), Command.queueStats) { arguments in
                    queueStats(directory: arguments.options["--dir"] ?? "")
                }
            case "add": return parsed(Array(rest.dropFirst()), queueAddCommand, queueAdd)
            case "flush": return parsed(Array(rest.dropFirst()), queueFlushCommand, queueFlush)
            case let word?: return group("queue", word)
            case nil: return help("queue")
            }
        case "firmware":
            switch rest.first {
            case "update": return parsed(Array(rest.dropFirst()), Command.firmwareUpdate, firmwareUpdate)
            case "verify": return parsed(Array(rest.dropFirst()), Command.firmwareVerify, firmwareVerify)
            case let word?: return group("firmware", word)
            case nil: return help("firmware")
            }
        case "reachability":
            return parsed(rest, Command.reachability) { arguments in
                reachability(
                    host: arguments.options["--host"], namespace: arguments.options["--netns"], watch: arguments.flags.contains("--watch"))
            }
        case "config":
            switch rest.first {
            case "check": return parsed(Array(rest.dropFirst()), Command.configCheck, configCheck)
            case "show": return parsed(Array(rest.dropFirst()), Command.configShow, configShow)
            case let word?: return group("config", word)
            case nil: return help("config")
            }
        default: return usageError("Unexpected argument '\(first)'", Command(name: "", usage: "<subcommand>"))
        }
    }

    /// A command group (`queue`, `config`, `firmware`) given `word`: its help page for `-h`,
    /// the version for `--version`, else a usage error.
    static func group(_ name: String, _ word: String) -> Int32 {
        switch word {
        case "-h", "--help": return help(name)
        case "--version": return say(version)
        default: return usageError("Unexpected argument '\(word)'", Command(name: name, usage: "\(name) <subcommand>"))
        }
    }

    /// Prints the help page of the command `words` name.
    @discardableResult
    static func help(_ words: String) -> Int32 {
        say(helpPage(words) ?? "")
    }

    /// A command's words, usage line and what it takes.
    struct Command {
        /// The words after `fire-agent` ("config check").
        var name: String
        /// Its usage after `fire-agent`, as `--help` shows it.
        var usage: String
        var options: Set<String> = []
        var flags: Set<String> = []
        var positionals = 0
        /// Options that may be given again, each value kept (`--key`).
        var repeated: Set<String> = []
        /// Positional arguments that must be given, with their help lines, in order.
        var requiredPositionals: [(name: String, help: String)] = []
        /// Options that must be given.
        var required: [String] = []
        /// Options whose value must be a whole number.
        var integers: Set<String> = []
        /// Options whose value must be a number of seconds: a number (else the parser's error),
        /// finite and not negative (else the command's own check, named after the option).
        var seconds: Set<String> = []
        /// Short spellings of options and flags (`-X` for `--method`); flags may be grouped
        /// (`-ik`).
        var aliases: [String: String] = [:]
        /// Each option's help line (what a usage error about it shows).
        var help: [String: String] = [:]

        /// The name of an option's value in usage errors: its long name without the dashes.
        func valueName(_ option: String) -> String {
            String((aliases[option] ?? option).dropFirst(2))
        }

        /// The help line of `--config` where the default applies.
        static let configHelp = "The config file (default \(AgentConfig.defaultPath))."

        static let run = Command(name: "run", usage: "run [--config <config>]", options: ["--config"], help: ["--config": configHelp])
        static let sync = Command(
            name: "sync", usage: "sync [--config <config>] [--once]", options: ["--config"], flags: ["--once"],
            help: ["--config": configHelp])
        static let status = Command(
            name: "status", usage: "status [--config <config>] [--status-file <status-file>] [--json]",
            options: ["--config", "--status-file"], flags: ["--json"],
            help: [
                "--config": "The config file naming the status file (default \(AgentConfig.defaultPath)).",
                "--status-file": "Read this status file instead of the config's daemon.statusFile.",
            ])
        static let reachability = Command(
            name: "reachability", usage: "reachability [--watch] [--host <host>] [--netns <netns>]", options: ["--host", "--netns"],
            flags: ["--watch"],
            help: [
                "--host": "Judge the kernel's route to this host (name or address) instead of any default route.",
                "--netns": "Watch the network namespace in FILE (e.g. /run/netns/NAME) instead of this process's.",
            ])
        static let queueList = Command(
            name: "queue list", usage: "queue list --dir <dir> [--limit <limit>]", options: ["--dir", "--limit"], required: ["--dir"],
            integers: ["--limit"], help: ["--dir": "The queue's directory.", "--limit": "Print at most this many records."])
        static let queueStats = Command(
            name: "queue stats", usage: "queue stats --dir <dir>", options: ["--dir"], required: ["--dir"],
            help: ["--dir": "The queue's directory."])
        static let configShow = Command(
            name: "config show", usage: "config show [--config <config>] [--show-secrets]", options: ["--config"],
            flags: ["--show-secrets"], help: ["--config": configHelp])
        static let firmwareUpdate = Command(
            name: "firmware update", usage: "firmware update [--config <config>] [--once]", options: ["--config"], flags: ["--once"],
            help: ["--config": configHelp])
        static let firmwareVerify = Command(
            name: "firmware verify",
            usage: "firmware verify <manifest> [--key <key> ...] [--signature <signature>] [--image <image>] [--device-type <device-type>]",
            options: ["--key", "--signature", "--image", "--device-type"], positionals: 1, repeated: ["--key"],
            requiredPositionals: [("manifest", "The manifest (JSON, as signed).")],
            help: [
                "--key": "A public key (PEM or DER) or certificate; repeat for several.",
                "--signature": "The detached signature (default: MANIFEST.sig).",
                "--image": "An image to check against the manifest's size and SHA-256.",
                "--device-type": "Also check that the manifest is for this device type.",
            ])
        static let configCheck = Command(
            name: "config check", usage: "config check [<file>] [--config <config>]", options: ["--config"], positionals: 1,
            help: ["--config": "The config file."])
    }

    /// Options and flags as the command line gave them.
    struct Parsed {
        var options: [String: String] = [:]
        /// Every value of a repeated option, in order.
        var lists: [String: [String]] = [:]
        var flags: Set<String> = []
        var positionals: [String] = []
    }

    /// Reads `arguments` (`--name value`, `--name=value`, `-X value`, flags alone or grouped
    /// as `-ik`, up to `positionals` plain arguments) as swift-argument-parser reads them and
    /// runs `body` with them (options under their long names); a usage error otherwise.
    static func parsed(_ arguments: [String], _ command: Command, _ body: (Parsed) -> Int32) -> Int32 {
        var result = Parsed()
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "-h" || argument == "--help" { return help(command.name) }
            if argument == "--version" { return say(version) }
            var words: [(spelled: String, value: String?)] = []
            if argument.hasPrefix("--") {
                if let equals = argument.firstIndex(of: "=") {
                    words.append((String(argument[..<equals]), String(argument[argument.index(after: equals)...])))
                } else {
                    words.append((argument, nil))
                }
            } else if argument.hasPrefix("-") && argument.utf8.count > 1 {
                if command.aliases[argument] != nil {
                    words.append((argument, nil))
                } else {
                    // Grouped short flags: each must be a flag.
                    for character in argument.dropFirst() {
                        let short = "-" + String(character)
                        guard let long = command.aliases[short], command.flags.contains(long) else {
                            return usageError("Unknown option '\(short)'", command)
                        }
                        words.append((short, nil))
                    }
                }
            } else if result.positionals.count < command.positionals {
                result.positionals.append(argument)
                continue
            } else {
                return usageError("Unexpected argument '\(argument)'", command)
            }
            for (spelled, given) in words {
                let name = command.aliases[spelled] ?? spelled
                var value = given
                if command.options.contains(name) {
                    if value == nil {
                        // As swift-argument-parser: a word that starts with '-' is not taken as
                        // a value (`--limit=-1` passes one).
                        guard index < arguments.count, !(arguments[index].hasPrefix("-") && arguments[index].utf8.count > 1) else {
                            return usageError(
                                "Missing value for '\(spelled) <\(command.valueName(name))>'", command, about: name, spelled: spelled)
                        }
                        value = arguments[index]
                        index += 1
                    }
                    result.options[name] = value
                    if command.repeated.contains(name), let value { result.lists[name, default: []].append(value) }
                } else if command.flags.contains(name) && value == nil {
                    result.flags.insert(name)
                } else {
                    return usageError("Unknown option '\(spelled)'", command)
                }
            }
        }
        for (index, positional) in command.requiredPositionals.enumerated() where result.positionals.count <= index {
            return usageError(
                "Missing expected argument '<\(positional.name)>'", command, helpLine: "<\(positional.name)>  \(positional.help)")
        }
        for name in command.required where result.options[name] == nil {
            return usageError("Missing expected argument '\(name) <\(command.valueName(name))>'", command, about: name)
        }
        for name in command.integers {
            if let value = result.options[name], Int64(value) == nil {
                return usageError("The value '\(value)' is invalid for '\(name) <\(command.valueName(name))>'", command, about: name)
            }
        }
        for name in command.seconds.sorted() {
            guard let value = result.options[name] else { continue }
            guard let seconds = Double(value) else {
                return usageError("The value '\(value)' is invalid for '\(name) <\(command.valueName(name))>'", command, about: name)
            }
            guard seconds.isFinite, seconds >= 0 else {
                return usageError("\(name) takes a number of seconds (0 or more), not \(seconds)", command)
            }
        }
        // Others can read a command line while it runs: proxy passwords are hidden from them.
        TransferOptions.hideCredentials(in: result)
        return body(result)
    }

    // MARK: - Commands

    static func sync(_ arguments: Parsed) -> Int32 {
        guard arguments.flags.contains("--once") else {
            return usageError("sync needs --once (`fire-agent run` is the daemon)", Command.sync)
        }
        return syncOnce(configPath: arguments.options["--config"] ?? AgentConfig.defaultPath)
    }

    /// `fire-agent sync --once`: one collection and delivery cycle; its figures on standard
    /// output. Exit 0 when the queue is empty, 75 when batches stay queued (why on standard
    /// error), 78 for a bad config, 23 when the agent's queue cannot be opened.
    package static func syncOnce(configPath: String) -> Int32 {
        guard let config = loadConfig(configPath) else { return Exit.configError }
        let agent: TelemetryAgent
        do throws(AgentError) {
            agent = try TelemetryAgent(config: config, logger: logger(config.logging))
        } catch {
            printError("fire-agent: \(error.description)")
            return Exit.writeError
        }
        defer { agent.close() }
        let report = agent.syncOnce()
        print(
            "collected \(report.collectedPoints) points, spooled \(report.spooledLines) lines (\(report.rejectedLines) rejected); "
                + "queued \(report.queuedBatches) batches; delivered \(report.delivered), discarded \(report.discarded), "
                + "remaining \(report.remaining)")
        if let failure = report.failure {
            printError("fire-agent: delivery stopped: \(failure)")
            return Exit.deferred
        }
        return Exit.success
    }

    /// `fire-agent run`: the daemon until SIGTERM or SIGINT (SIGHUP reloads). Exit 0 once
    /// stopped, 78 for a bad config, 23 when the agent cannot start (its queue), 99 when a
    /// reload could bring up neither config.
    /// - Parameters:
    ///   - configPath: the config file.
    ///   - options: how the daemon is hosted (signals handled by default).
    package static func runDaemon(configPath: String, options: AgentDaemon.Options = AgentDaemon.Options()) -> Int32 {
        guard let config = loadConfig(configPath) else { return Exit.configError }
        let daemon: AgentDaemon
        do throws(AgentError) {
            daemon = try AgentDaemon(
                configPath: configPath, config: config, options: options, makeLogger: logger)
        } catch {
            printError("fire-agent: \(error.description)")
            return Exit.writeError
        }
        do throws(AgentError) {
            try daemon.run()
        } catch {
            printError("fire-agent: \(error.description)")
            return Exit.internalError
        }
        return Exit.success
    }

    /// `fire-agent reachability`: one line — `reachable IFACE TYPE`, `not-reachable` or
    /// `unknown` — and exit 0 when reachable, 1 otherwise; with `watch`, that line and then one
    /// per change until a signal ends the process. 99 when netlink cannot be used.
    /// - Parameters:
    ///   - host: judge the kernel's route to this host (a name is resolved first) instead of any
    ///     default route.
    ///   - namespace: a network namespace file to watch instead of this process's.
    ///   - watch: keep printing changes.
    package static func reachability(host: String?, namespace: String?, watch: Bool) -> Int32 {
        let judge: RouteJudge
        do throws(NetworkReachabilityError) {
            judge = try RouteJudge(host: host, networkNamespace: namespace)
            if !watch {
                judge.resolveHost()
                let (status, failure) = judge.evaluate {}
                if let failure { printError("fire-agent: reachability: \(failure)") }
                printLine(status.description)
                return status.isReachable ? Exit.success : 1
            }
            unblockTerminationSignals()
            return watchRoutes(judge, until: nil) { status in
                printLine(status.description)
                return false
            } ? Exit.success : Exit.internalError
        } catch {
            printError("fire-agent: \(error.description)")
            return Exit.internalError
        }
    }

    /// Follows the routing state of `judge`'s namespace on this thread (its netlink events, a
    /// host name's new addresses through a wake pipe) and calls `changed` with the first status
    /// and every change, until it returns true or `deadline` passes.
    /// - Returns: true when `changed` ended the watch; false at the deadline, or when the
    ///   event socket cannot be opened (the reason is printed).
    static func watchRoutes(_ judge: RouteJudge, until deadline: Instant?, _ changed: (ReachabilityStatus) -> Bool) -> Bool {
        let routes: RouteWatch
        let mailbox: DaemonMailbox
        do throws(NetworkReachabilityError) {
            routes = try RouteWatch(judge: judge, receiveBuffer: AgentDaemon.routeEventBuffer)
        } catch {
            printError("fire-agent: \(error.description)")
            return false
        }
        do throws(AgentError) {
            // A name's new addresses arrive on another thread, through the daemon's wake pipe.
            mailbox = try DaemonMailbox()
        } catch {
            printError("fire-agent: \(error.description)")
            return false
        }
        while true {
            let (status, failure) = routes.checkIfDue { mailbox.post(.routesMoved) }
            if let failure { printError("fire-agent: reachability: \(failure)") }
            if let status, changed(status) { return true }
            let now = Instant.now()
            var until = routes.checkAt
            if let deadline {
                if now >= deadline { return false }
                if let due = until, due <= deadline {} else { until = deadline }
            }
            var timeout: Int32 = -1
            if let until { timeout = until > now ? Int32(clamping: (until.since(now).nanosecondsClamped + 999_999) / 1_000_000) : 0 }
            var fds = [
                pollfd(fd: routes.descriptor, events: Int16(POLLIN), revents: 0),
                pollfd(fd: mailbox.readEnd, events: Int16(POLLIN), revents: 0),
            ]
            _ = poll(&fds, nfds_t(fds.count), timeout)
            if fds[0].revents != 0, let note = routes.readEvents() { printError("fire-agent: reachability: \(note)") }
            if fds[1].revents != 0 {
                mailbox.drain()
                if !mailbox.take().isEmpty { routes.scheduleCheck() }
            }
        }
    }

    /// Unblocks SIGINT, SIGTERM and SIGHUP: a parent may start us with signals blocked (a
    /// spawning thread's mask is inherited), and a command that runs until stopped must be
    /// stoppable.
    static func unblockTerminationSignals() {
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
    }

    /// One line on standard output, written at once (scripts read lines as they come).
    static func printLine(_ text: String) {
        _ = writeAll(1, Array((text + "\n").utf8))
    }

    /// `fire-agent queue list`: one line per queued record, oldest first — `SEQUENCE AGE_S METHOD
    /// URL BODY_BYTES IDEMPOTENCY_KEY` — at most `limit`; read without the queue's lock (works
    /// while the agent runs). Exit 26 when `directory` holds no usable queue.
    package static func queueList(directory: String, limit: Int) -> Int32 {
        guard let store = inspectQueue(directory) else { return Exit.readError }
        defer { store.close() }
        let now = Instant.wallClockMilliseconds()
        for entry in store.entries(limit: max(0, limit)) {
            // A record that can no longer be read is left out (the store logged why).
            guard let payload = try? store.read(entry) else { continue }
            printLine(
                "\(entry.sequence) \(ageText(now, entry.enqueuedAtMilliseconds)) \(payload.method) \(payload.url) "
                    + "\(payload.body.length) \(payload.idempotencyKey)")
        }
        return Exit.success
    }

    /// `fire-agent queue stats`: counts, bytes, the oldest record's age and the counters, as
    /// `key=value` lines; read without the queue's lock. Exit 26 when `directory` holds no
    /// usable queue.
    package static func queueStats(directory: String) -> Int32 {
        guard let store = inspectQueue(directory) else { return Exit.readError }
        defer { store.close() }
        let totals = store.totals()
        let now = Instant.wallClockMilliseconds()
        printLine("records=\(totals.records)")
        printLine("bytes=\(totals.bytes)")
        printLine("oldest_age_s=\(totals.oldest.map { ageText(now, $0) } ?? "-")")
        printLine("delivered=\(totals.cursor.delivered)")
        printLine("discarded=\(totals.cursor.discarded)")
        printLine("dropped_oldest=\(totals.cursor.droppedOldest)")
        printLine("rejected_new=\(totals.cursor.rejectedNew)")
        printLine("quarantined=\(totals.cursor.quarantined)")
        return Exit.success
    }

    /// The queue in `directory`, opened read-only without its lock, or nil once the reason is
    /// printed.
    static func inspectQueue(_ directory: String) -> OfflineQueueStore? {
        let limits = OfflineQueueStore.Limits(
            maxRecords: .max, maxBytes: .max, dropOldest: false, segmentBytes: OfflineQueueStore.defaultSegmentBytes,
            cursorSyncInterval: .seconds(1))
        do throws(OfflineQueueError) {
            return try OfflineQueueStore(directory: directory, limits: limits, logger: LogOutput.standardError, readOnly: true)
        } catch {
            printError("fire-agent: \(error.description)")
            return nil
        }
    }

    /// Seconds from `milliseconds` to `now` with one decimal (0.0 for a time in the future).
    static func ageText(_ now: UInt64, _ milliseconds: UInt64) -> String {
        let elapsed = now >= milliseconds ? now - milliseconds : 0
        let tenths = (elapsed + 50) / 100
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// The checked config at `path`, or nil once its problems are printed (exit 78 follows).
    static func loadConfig(_ path: String) -> AgentConfig? {
        do throws(ConfigError) {
            return try AgentConfig.load(path: path)
        } catch {
            printError(error.description)
            return nil
        }
    }

    static func status(_ arguments: Parsed) -> Int32 {
        status(
            configPath: arguments.options["--config"], statusFile: arguments.options["--status-file"],
            json: arguments.flags.contains("--json"))
    }

    /// `fire-agent status`: the daemon's status file, for people or as JSON. Exit 0 when the
    /// daemon runs, 69 when it does not, 75 when what it wrote is stale, 78 for a bad config.
    /// - Parameters:
    ///   - configPath: the config naming the status file (default `AgentConfig.defaultPath`).
    ///   - statusFile: read this file instead.
    ///   - json: print the document.
    package static func status(configPath: String?, statusFile: String?, json: Bool) -> Int32 {
        let path: String
        if let statusFile {
            path = statusFile
        } else {
            do throws(ConfigError) {
                path = try AgentConfig.load(path: configPath ?? AgentConfig.defaultPath).daemon.statusFile
            } catch {
                printError(error.description)
                return Exit.configError
            }
        }
        let status: AgentStatus
        do throws(AgentError) {
            status = try AgentStatus.read(path: path)
        } catch {
            printError("fire-agent: not running: \(error.description)")
            return Exit.notRunning
        }
        let alive = status.daemonIsAlive
        var shown = status
        shown.stale = status.staleness(now: .now(), alive: alive, fileSystem: AgentStatus.fileSystemProblem(of: path))
        if json {
            if !alive { shown.state = "stopped" }
            print(String(decoding: shown.encoded(), as: UTF8.self))
        } else {
            print(shown.describe(alive: alive, now: .now()))
        }
        if !alive { return Exit.notRunning }
        // 75 (EX_TEMPFAIL): it runs, but what it last wrote is old; ask again later.
        return shown.stale == nil ? Exit.success : Exit.deferred
    }

    static func configCheck(_ arguments: Parsed) -> Int32 {
        configCheck(path: arguments.positionals.first ?? arguments.options["--config"] ?? AgentConfig.defaultPath)
    }

    /// `fire-agent config check`: the file's problems with their key paths (exit 78), or `ok`
    /// with the device, the server and the proxy in use.
    package static func configCheck(path: String) -> Int32 {
        do throws(ConfigError) {
            let loaded = try AgentConfig.load(path: path)
            print("\(path): ok (device \(loaded.device.id), server \(loaded.server.url.absoluteString))")
            if let proxy = loaded.network.proxy.proxy(forScheme: loaded.server.url.scheme, host: loaded.server.url.host ?? "") {
                print("proxy: \(proxy.description) (from \(loaded.network.proxyFromConfig ? "network.proxy" : "the environment"))")
            }
            // Not a config error (the agent runs, and the file may change): said, as a warning.
            if let problem = loaded.firmware?.inhibitFileProblem { printError("warning: firmware.inhibitFile: \(problem)") }
            for entry in loaded.network.ignoredNoProxyEntries { printError("warning: \(entry)") }
            return Exit.success
        } catch {
            printError(error.description)
            return Exit.configError
        }
    }

    static func configShow(_ arguments: Parsed) -> Int32 {
        configShow(path: arguments.options["--config"] ?? AgentConfig.defaultPath, showSecrets: arguments.flags.contains("--show-secrets"))
    }

    /// `fire-agent config show`: the effective config, defaults filled in, as JSON (valid JSON5,
    /// usable as a config file); passwords and tokens masked unless `showSecrets`. Exit 78 with
    /// the file's problems.
    package static func configShow(path: String, showSecrets: Bool) -> Int32 {
        do throws(ConfigError) {
            let text = try AgentConfig.load(path: path).rendered(maskingSecrets: !showSecrets)
            _ = writeAll(1, Array(text.utf8))
            return Exit.success
        } catch {
            printError(error.description)
            return Exit.configError
        }
    }

    // MARK: - Firmware

    static func firmwareUpdate(_ arguments: Parsed) -> Int32 {
        guard arguments.flags.contains("--once") else {
            return usageError("firmware update needs --once (`fire-agent run` is the daemon)", Command.firmwareUpdate)
        }
        return firmwareUpdate(configPath: arguments.options["--config"] ?? AgentConfig.defaultPath)
    }

    /// `fire-agent firmware update --once`: one firmware cycle, as the daemon runs it. What it
    /// came to on standard output (success) or standard error; exit statuses in `Exit.code(_:)`,
    /// 16 when another fire-agent holds the flow, 78 for a config without a firmware section.
    /// - Parameters:
    ///   - configPath: the config file.
    ///   - userAgent: the `User-Agent` of its requests.
    package static func firmwareUpdate(configPath: String, userAgent: String = FleetServer.defaultUserAgent) -> Int32 {
        guard let config = loadConfig(configPath) else { return Exit.configError }
        guard let firmware = config.firmware else {
            printError("fire-agent: \(configPath) has no firmware section: nothing to update")
            return Exit.configError
        }
        let log = logger(config.logging)
        let points = AgentPoints(logger: log)
        let updater: FirmwareUpdater
        do throws(AgentError) {
            updater = try FirmwareUpdater(
                config: firmware, agentConfig: config, logger: log, environment: ProcessEnvironment.current(),
                userAgent: userAgent, points: points
            ) {}
        } catch {
            printError("fire-agent: \(error.description)")
            return error.isBusy ? Exit.busy : Exit.writeError
        }
        let outcome = updater.runOnce()
        keepCyclePoints(points, config: config, logger: log, userAgent: userAgent)
        switch outcome {
        case .upToDate(let text):
            say("up to date: \(text)")
        case .installed(let text), .committed(let text):
            say(text)
        case .refused(let text), .failed(let text), .rolledBack(let text), .deferred(let text):
            printError("fire-agent: \(text)")
        }
        return Exit.code(outcome)
    }

    /// Hands a one-shot cycle's `fire_agent_update` points to the telemetry queue, opened for
    /// that moment only (a daemon started meanwhile is not kept from it for the whole cycle);
    /// the next sync, or the daemon, delivers them. When the queue is held by a running daemon
    /// they are not kept: the log says so (the status events went through the firmware's own
    /// report queue all the same).
    private static func keepCyclePoints(_ points: AgentPoints, config: AgentConfig, logger: Logger, userAgent: String) {
        guard points.waiting > 0 else { return }
        do throws(AgentError) {
            let telemetry = try TelemetryAgent(config: config, logger: logger, userAgent: userAgent)
            points.attach(telemetry)
            points.attach(nil)
            telemetry.close()
        } catch {
            logger.warning(
                "the cycle's fire_agent_update points are not kept: the telemetry queue cannot be opened",
                metadata: ["points": "\(points.waiting)", "reason": "\(error)"])
        }
    }

    static func firmwareVerify(_ arguments: Parsed) -> Int32 {
        firmwareVerify(
            manifest: arguments.positionals.first ?? "", keys: arguments.lists["--key"] ?? [], signature: arguments.options["--signature"],
            image: arguments.options["--image"], deviceType: arguments.options["--device-type"])
    }

    /// `fire-agent firmware verify`: what the agent checks before an install, run by hand (a
    /// vendor before publishing, an operator looking at a staged image). Exit 0 when valid, 65
    /// with the reason when refused, 26 when a file cannot be read, 64 without a key.
    /// - Parameters:
    ///   - manifest: the manifest file.
    ///   - keys: the public key (or certificate) files.
    ///   - signature: the signature file (default: the manifest's path + `.sig`).
    ///   - image: an image to check against the manifest's size and SHA-256.
    ///   - deviceType: a device type the manifest must list.
    package static func firmwareVerify(manifest: String, keys: [String], signature: String?, image: String?, deviceType: String?)
        -> Int32
    {
        // As the host's parser reports a check its command makes itself: the root usage.
        guard !keys.isEmpty else {
            return usageError("--key is required (the vendor's public key)", Command(name: "", usage: "<subcommand>"))
        }
        var loaded: [ManifestKey] = []
        for path in keys {
            do throws(ManifestKeyError) {
                loaded.append(try ManifestKey(contentsOf: path))
            } catch {
                printError("fire-agent: \(error.description)")
                return Exit.readError
            }
        }
        let files = SystemFiles()
        let signaturePath = signature ?? manifest + ".sig"
        guard let bytes = files.readBytes(manifest, limit: FirmwareManifest.maximumBytes + 1, whole: true, regularOnly: false) else {
            printError("fire-agent: \(manifest) cannot be read")
            return Exit.readError
        }
        guard let signed = files.readBytes(signaturePath, limit: ManifestSignature.maximumBytes + 1, whole: true, regularOnly: false)
        else {
            printError("fire-agent: \(signaturePath) cannot be read")
            return Exit.readError
        }
        do throws(FirmwareRefusal) {
            let key = try ManifestSignature.verify(signed, of: bytes, keys: loaded)
            say("signature: valid, by \(key.description)")
            let parsed = try FirmwareManifest.parse(bytes, from: FirmwareManifest.fileBase)
            let path = percentDecoded(Substring(parsed.image.path)) ?? parsed.image.path
            let location = parsed.image.host == "manifest.invalid" ? "\(path.dropFirst()) (beside the manifest)" : parsed.imageURL
            say("manifest:  version \(parsed.version.description) for \(parsed.compatible.joined(separator: ", ")); image \(location)")
            say("           \(parsed.size) bytes, sha256 \(parsed.sha256Hex)")
            if let expires = parsed.expires { say("           expires \(expires.description)") }
            if let deviceType {
                try UpdateDecision.check(parsed, deviceType: deviceType, highestAccepted: nil, allowDowngrade: true, now: .now())
                say("device:    \(deviceType): compatible, not expired")
            }
            if let image {
                let started = Instant.now()
                try parsed.verifyImage(at: image)
                let milliseconds = Instant.now().since(started).wholeMilliseconds
                say("image:     \(image): size and SHA-256 match (hashed in \(milliseconds) ms)")
            }
        } catch {
            printError("fire-agent: refused: \(error.description)")
            return Exit.refused
        }
        return Exit.success
    }

    // MARK: - Output

    /// The agent's logger for a config's `logging` section: its format and level, on standard
    /// error (journald's layout when standard error is the journal).
    @Sendable static func logger(_ logging: AgentConfig.Logging) -> Logger {
        let format = LogOutput.Format(rawValue: logging.format) ?? .text
        let stream = getenv("JOURNAL_STREAM").map { String(cString: $0) }
        return Logger(
            label: "fire-agent", output: LogOutput(format: format, journal: LogOutput.stderrIsJournal(journalStream: stream)),
            level: logging.level)
    }

    @discardableResult
    static func say(_ text: String) -> Int32 {
        print(text)
        return Exit.success
    }

    /// "Error: …", the help line of the option it is `about` (if any), the command's usage and
    /// where its help is, on standard error: exit 64.
    static func usageError(
        _ message: String, _ command: Command, about option: String? = nil, spelled: String? = nil, helpLine: String? = nil
    ) -> Int32 {
        let help = command.name.isEmpty ? "fire-agent --help" : "fire-agent \(command.name) --help"
        var text = "Error: \(message)\n"
        if let option, let line = command.help[option] {
            text += "Help:  \(spelled ?? option) <\(command.valueName(option))>  \(line)\n"
        }
        if let helpLine { text += "Help:  \(helpLine)\n" }
        printError(text + "Usage: fire-agent \(command.usage)\n  See '\(help)' for more information.")
        return Exit.usage
    }

    /// One line on standard error, control characters shown as `\xNN`.
    static func printError(_ text: String) {
        let line = Array((text.escapingControlCharacters() + "\n").utf8)
        _ = writeAll(2, line)
    }
}
