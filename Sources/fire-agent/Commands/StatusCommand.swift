import ArgumentParser
import FireAgentCore

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

/// `fire-agent status`: what the running daemon last wrote to its status file.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the running daemon's status: last sync and delivery, queue, dead letters, reachability, config.",
        discussion:
            "Exit status: 0 when the daemon runs, 69 when it does not (its last status is still shown), 75 when it runs but "
            + "has not rewritten its status when due (what is shown is stale, and why), 78 for a bad config.")

    @Option(name: .customLong("config"), help: "The config file naming the status file (default \(AgentConfig.defaultPath)).")
    var config: String?

    @Option(name: .customLong("status-file"), help: "Read this status file instead of the config's daemon.statusFile.")
    var statusFile: String?

    @Flag(name: .customLong("json"), help: "Print the status document as JSON (for scripts).")
    var json = false

    func run() throws {
        let path: String
        if let statusFile {
            path = statusFile
        } else {
            do {
                path = try AgentConfig.load(path: config ?? AgentConfig.defaultPath).daemon.statusFile
            } catch {
                printError("\(error)")
                throw ExitCode(ExitStatus.configError.rawValue)
            }
        }
        let status: AgentStatus
        do {
            status = try AgentStatus.read(path: path)
        } catch {
            printError("fire-agent: not running: \(error)")
            throw ExitCode(ExitStatus.notRunning.rawValue)
        }
        let alive = status.daemonIsAlive
        var shown = status
        shown.stale = status.staleness(now: Date(), alive: alive, fileSystem: Self.fileSystemProblem(of: path))
        if json {
            if !alive { shown.state = "stopped" }
            print(String(decoding: shown.encoded(), as: UTF8.self))
        } else {
            print(Self.describe(shown, alive: alive, now: Date()))
        }
        if !alive { throw ExitCode(ExitStatus.notRunning.rawValue) }
        // 75 (EX_TEMPFAIL): it runs, but what it last wrote is old; ask again later.
        if shown.stale != nil { throw ExitCode(ExitStatus.deferred.rawValue) }
    }

    /// What keeps a file in `path`'s directory from being written, if anything visible:
    /// a read-only or full file system.
    static func fileSystemProblem(of path: String) -> String? {
        let directory = path.contains("/") ? String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) : "."
        var info = statvfs()
        guard statvfs(directory.isEmpty ? "/" : directory, &info) == 0 else { return nil }
        if info.f_flag & UInt(ST_RDONLY) != 0 { return "its file system (\(directory)) is read-only" }
        if info.f_bavail == 0 { return "its file system (\(directory)) is full" }
        if info.f_favail == 0 && info.f_files > 0 { return "its file system (\(directory)) has no free inodes" }
        return nil
    }

    /// The status for people.
    static func describe(_ status: AgentStatus, alive: Bool, now: Date) -> String {
        func when(_ date: Date) -> String {
            let seconds = Int(now.timeIntervalSince(date).rounded())
            return "\(AgentLogHandler.timestamp(date)) (\(seconds < 0 ? "in the future" : "\(seconds) s ago"))"
        }
        let state = alive ? status.state : "not running (\(status.state == "stopped" ? "stopped" : "gone without stopping"))"
        var lines = ["fire-agent \(status.version): \(state), pid \(status.pid), started \(when(status.startedAt))"]
        if let stale = status.stale { lines.append("STALE:         what follows is old: \(stale)") }
        var config = "config:        \(status.configFile), loaded \(when(status.configLoadedAt))"
        if let error = status.reloadError { config += "\n               last reload refused: \(error)" }
        lines.append(config)
        lines.append("reachability:  \(status.reachability)")
        if let clock = status.clock { lines.append("clock:         \(clock)") }
        if let sync = status.lastSync {
            var line =
                "last sync:     \(when(sync.at)): \(sync.queuedBatches) batches queued, \(sync.spooledLines) spool lines "
                + "(\(sync.rejectedLines) rejected)"
            if let error = sync.error { line += ", error: \(error)" }
            lines.append(line)
        } else {
            lines.append("last sync:     none yet")
        }
        if let delivery = status.lastDelivery {
            var line = "last delivery: \(when(delivery.at)): \(delivery.result)"
            if let code = delivery.status { line += " (HTTP \(code))" }
            if let reason = delivery.reason { line += ": \(reason)" }
            lines.append(line)
        }
        lines.append("last success:  \(status.lastSuccessfulDelivery.map(when) ?? "none since start")")
        let queue = status.queue
        var queueLine = "queue:         \(queue.records) batches, \(queue.bytes) bytes"
        if let age = queue.oldestAgeSeconds { queueLine += ", oldest \(Int(age)) s" }
        queueLine +=
            "; delivered \(queue.delivered), dropped \(queue.dropped), rejected \(queue.rejected), discarded \(queue.discarded), "
            + "quarantined \(queue.quarantined)"
        if let failure = queue.lastFailure { queueLine += "\n               failing (\(queue.headFailures) attempts): \(failure)" }
        lines.append(queueLine)
        lines.append("dead letters:  \(status.deadLetters)")
        lines.append("spool:         \(status.rejectedSpoolLines) lines rejected since start")
        for (name, reason) in status.stoppedCollectors.sorted(by: { $0.key < $1.key }) {
            lines.append("collector off: \(name): \(reason)")
        }
        if let firmware = status.firmware {
            var line = "firmware:      \(firmware.phase)"
            if let version = firmware.version, !version.isEmpty {
                line += " \(version)" + (firmware.fromVersion.map { " (from \($0))" } ?? "")
            }
            if firmware.phase == "downloading", firmware.size > 0 {
                let percent = Int((Double(firmware.downloadedBytes) / Double(firmware.size) * 100).rounded(.down))
                line += ": \(firmware.downloadedBytes) of \(firmware.size) bytes (\(percent) %)"
            }
            if let since = firmware.since { line += ", since \(when(since))" }
            if let reason = firmware.reason { line += "\n               \(reason)" }
            if let waiting = firmware.waiting, firmware.reason != "waiting: \(waiting)" { line += "\n               waiting: \(waiting)" }
            if let check = firmware.lastCheck {
                line += "\n               last check \(when(check)): \(firmware.lastCheckResult ?? "")"
            }
            if let floor = firmware.highestAccepted { line += "\n               highest version accepted: \(floor)" }
            lines.append(line)
        }
        lines.append("written:       \(when(status.updatedAt))")
        return lines.joined(separator: "\n")
    }
}
