import Synchronization
import TinyFire

#if canImport(Glibc)
    import Glibc
#endif

/// `fire-agent request --progress`: on a terminal, one bar redrawn in place on stderr; when
/// stderr is a file or a pipe (a journal, a log), one plain line per second and a last one
/// at the end, so logs stay readable.
final class ProgressDisplay: Sendable {
    private struct State {
        var started: timespec
        var lastLine: Double = -1
        var lastPrinted: TransferProgress?
        var drewBar = false
        var last: (direction: String, progress: TransferProgress)?
    }

    private let isTerminal: Bool
    private let state: Mutex<State>

    /// Starts the clock (rates count from here).
    init() {
        isTerminal = isatty(STDERR_FILENO) == 1
        state = Mutex(State(started: Self.monotonic()))
    }

    /// Shows a new value (called on the session's queue, about ten times a second at most).
    func update(_ direction: String, _ progress: TransferProgress) {
        let now = Self.monotonic()
        let text = state.withLock { state -> String? in
            state.last = (direction, progress)
            let elapsed = Self.seconds(from: state.started, to: now)
            if isTerminal {
                state.drewBar = true
                return "\r" + bar(direction, progress, elapsed: elapsed)
            }
            guard elapsed - state.lastLine >= 1 else { return nil }
            state.lastLine = elapsed
            state.lastPrinted = progress
            return line(direction, progress, elapsed: elapsed) + "\n"
        }
        if let text { write(text) }
    }

    /// Ends the display: a newline after the bar, or a last line with the final value.
    func finish() {
        let now = Self.monotonic()
        let text = state.withLock { state -> String? in
            guard let (direction, progress) = state.last else { return nil }
            let elapsed = Self.seconds(from: state.started, to: now)
            if isTerminal { return state.drewBar ? "\r" + bar(direction, progress, elapsed: elapsed) + "\n" : nil }
            guard progress != state.lastPrinted else { return nil }
            return line(direction, progress, elapsed: elapsed) + "\n"
        }
        if let text { write(text) }
    }

    private func bar(_ direction: String, _ progress: TransferProgress, elapsed: Double) -> String {
        let width = 30
        var text = direction == "upload" ? "↑ " : "↓ "
        if progress.totalUnitCount > 0 {
            let filled = Int(progress.fractionCompleted * Double(width))
            text += "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "] "
            text += pad(String(Int(progress.fractionCompleted * 100)), 3) + "% "
        }
        text += "\(Self.size(progress.completedUnitCount))"
        if progress.totalUnitCount > 0 { text += " / \(Self.size(progress.totalUnitCount))" }
        text += "  \(Self.size(Int64(Double(progress.completedUnitCount) / max(elapsed, 0.001))))/s   "
        return text
    }

    private func line(_ direction: String, _ progress: TransferProgress, elapsed: Double) -> String {
        var text = "fire-agent: \(direction) \(Self.size(progress.completedUnitCount))"
        if progress.totalUnitCount > 0 {
            text += " of \(Self.size(progress.totalUnitCount)) (\(Int(progress.fractionCompleted * 100))%)"
        }
        return text + ", \(Self.size(Int64(Double(progress.completedUnitCount) / max(elapsed, 0.001))))/s"
    }

    private func pad(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }

    /// Bytes in binary units, one decimal.
    static func size(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        return "\(Double(Int(value * 10)) / 10) \(units[unit])"
    }

    private static func monotonic() -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now
    }

    private static func seconds(from start: timespec, to end: timespec) -> Double {
        Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9
    }

    private func write(_ text: String) {
        _ = text.withCString { Glibc.write(STDERR_FILENO, $0, strlen($0)) }
    }
}
