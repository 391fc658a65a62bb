/// Cuts lines of line protocol into upload batches: at most `maxPoints` lines and `maxBytes`
/// bytes (newlines included) each, in order. Sans-I/O: fed lines, hands out batches.
///
/// Memory: the batch being filled (at most `maxBytes`).
package struct Batcher: Sendable {
    /// Lines per batch at most.
    package let maxPoints: Int
    /// Bytes per batch at most.
    package let maxBytes: Int
    private var lines: [String] = []
    private var bytes = 0

    /// Creates a batcher.
    /// - Parameters:
    ///   - maxPoints: lines per batch (≥ 1).
    ///   - maxBytes: bytes per batch (a line longer than this is refused by `add`).
    package init(maxPoints: Int, maxBytes: Int) {
        self.maxPoints = max(1, maxPoints)
        self.maxBytes = max(1, maxBytes)
    }

    /// Why a line cannot go into any batch.
    package struct LineTooLong: Error, Sendable, CustomStringConvertible {
        /// The line's length with its newline.
        package let length: Int
        /// The batch bound.
        package let limit: Int
        /// The reason, in words.
        package var description: String { "a line of \(length) bytes does not fit in a batch of at most \(limit) bytes" }
    }

    /// Adds a line (without its newline); returns the batch it completed, if any.
    /// - Throws: `LineTooLong` when the line alone exceeds `maxBytes`.
    package mutating func add(_ line: String) throws(LineTooLong) -> Batch? {
        let size = line.utf8.count + 1
        guard size <= maxBytes else { throw LineTooLong(length: size, limit: maxBytes) }
        var completed: Batch?
        if lines.count == maxPoints || bytes + size > maxBytes { completed = flush() }
        lines.append(line)
        bytes += size
        return completed
    }

    /// The partly filled batch, if any.
    package mutating func flush() -> Batch? {
        guard !lines.isEmpty else { return nil }
        defer {
            lines = []
            bytes = 0
        }
        return Batch(lines: lines)
    }

    /// Drops the unfinished batch's lines after its first `count` (lines taken from files that
    /// stay where they are, when the batch cannot be queued: the files are read again later).
    package mutating func keepFirst(_ count: Int) {
        guard count < lines.count else { return }
        lines.removeLast(lines.count - max(0, count))
        bytes = lines.reduce(0) { $0 + $1.utf8.count + 1 }
    }

    /// Lines and bytes waiting in the unfinished batch.
    package var pending: (points: Int, bytes: Int) { (lines.count, bytes) }
}

/// One upload: lines of line protocol, sent newline-terminated (and gzip'd).
package struct Batch: Sendable, Equatable {
    /// The lines, without newlines.
    package var lines: [String]

    package init(lines: [String]) {
        self.lines = lines
    }

    /// The body: each line and a newline.
    package var body: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(lines.reduce(0) { $0 + $1.utf8.count + 1 })
        for line in lines {
            out.append(contentsOf: line.utf8)
            out.append(0x0A)
        }
        return out
    }

    /// The two halves, for a server that found the batch too large (413); nil for one line.
    package var halves: (Batch, Batch)? {
        guard lines.count > 1 else { return nil }
        let middle = lines.count / 2
        return (Batch(lines: Array(lines[..<middle])), Batch(lines: Array(lines[middle...])))
    }
}
