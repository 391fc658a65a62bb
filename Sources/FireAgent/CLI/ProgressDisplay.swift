import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `fire-agent request --progress`: on a terminal, one bar redrawn in place on stderr; when
/// stderr is a file or a pipe (a journal, a log), one plain line per second and a last one at
/// the end, so logs stay readable. Memory: the last value shown.
final class ProgressDisplay: Sendable {
    private struct Value: Equatable {
        var done: UInt64
        var total: UInt64?
    }

    private struct State {
        var lastLine: Double = -1
        var lastPrinted: Value?
        var drewBar = false
        var last: (direction: String, value: Value)?
    }

    private let isTerminal: Bool
    private let started = Instant.now()
    private let state = Locked(State())

    /// Starts the clock (rates count from here).
    init() {
        isTerminal = isatty(STDERR_FILENO) == 1
    }

    /// Shows a new value (called on the engine's thread, about ten times a second at most).
    func update(_ direction: String, done: UInt64, of total: UInt64?) {
        let value = Value(done: done, total: total)
        let elapsed = Instant.now().since(started).seconds
        let text = state.withLock { state -> String? in
            state.last = (direction, value)
            if isTerminal {
                state.drewBar = true
                return "\r" + bar(direction, value, elapsed: elapsed)
            }
            guard elapsed - state.lastLine >= 1 else { return nil }
            state.lastLine = elapsed
            state.lastPrinted = value
            return line(direction, value, elapsed: elapsed) + "\n"
        }
        if let text { _ = writeAll(2, Array(text.utf8)) }
    }

    /// Ends the display: a newline after the bar, or a last line with the final value.
    func finish() {
        let elapsed = Instant.now().since(started).seconds
        let text = state.withLock { state -> String? in
            guard let (direction, value) = state.last else { return nil }
            if isTerminal { return state.drewBar ? "\r" + bar(direction, value, elapsed: elapsed) + "\n" : nil }
            guard value != state.lastPrinted else { return nil }
            return line(direction, value, elapsed: elapsed) + "\n"
        }
        if let text { _ = writeAll(2, Array(text.utf8)) }
    }

    private func fraction(_ value: Value) -> Double? {
        guard let total = value.total, total > 0 else { return nil }
        return min(1, Double(value.done) / Double(total))
    }

    private func rate(_ value: Value, elapsed: Double) -> UInt64 {
        UInt64(Double(value.done) / max(elapsed, 0.001))
    }

    private func bar(_ direction: String, _ value: Value, elapsed: Double) -> String {
        let width = 30
        var text = direction == "upload" ? "↑ " : "↓ "
        if let fraction = fraction(value) {
            let filled = Int(fraction * Double(width))
            text += "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "] "
            let percent = String(Int(fraction * 100))
            text += String(repeating: " ", count: max(0, 3 - percent.utf8.count)) + percent + "% "
        }
        text += Self.size(value.done)
        if let total = value.total, total > 0 { text += " / \(Self.size(total))" }
        text += "  \(Self.size(rate(value, elapsed: elapsed)))/s   "
        return text
    }

    private func line(_ direction: String, _ value: Value, elapsed: Double) -> String {
        var text = "fire-agent: \(direction) \(Self.size(value.done))"
        if let fraction = fraction(value), let total = value.total {
            text += " of \(Self.size(total)) (\(Int(fraction * 100))%)"
        }
        return text + ", \(Self.size(rate(value, elapsed: elapsed)))/s"
    }

    /// Bytes in binary units, one decimal.
    static func size(_ bytes: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        let tenths = Int(value * 10)
        return "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }
}
