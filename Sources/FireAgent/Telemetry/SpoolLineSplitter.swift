/// Cuts a spool file's bytes into lines as they are read, in bounded memory. Sans-I/O: fed the
/// bytes of a file in order (from any starting offset), hands out each complete line with its
/// number and where it ends in the file, so that progress through the file can be recorded.
///
/// Memory: the unfinished line, at most `maxLineBytes` bytes. A longer line is not kept: it is
/// handed out as `.tooLong` with its first `SpoolLineSplitter.keptPrefixBytes` bytes once its
/// newline arrives.
package struct SpoolLineSplitter: Sendable {
    /// How much of a line longer than the bound is kept, to say in `rejected/` what it was.
    package static let keptPrefixBytes = 200

    /// One line of the file.
    package struct Line: Sendable, Equatable {
        /// What the line holds.
        package enum Content: Sendable, Equatable {
            /// The line's bytes, without its newline (and without a CR before it).
            case bytes([UInt8])
            /// A line longer than the bound: its first bytes and its whole length (newline included).
            case tooLong(prefix: [UInt8], length: Int)
            /// The file's last bytes, after its last newline: a line without its end.
            case torn([UInt8])
        }
        /// 1-based line number in the file.
        package var number: Int
        /// Offset just past the line's newline (for `.torn`, the end of the file).
        package var end: Int64
        /// The line.
        package var content: Content

        package init(number: Int, end: Int64, content: Content) {
            self.number = number
            self.end = end
            self.content = content
        }
    }

    /// Lines longer than this (newline included) are handed out as `.tooLong`.
    package let maxLineBytes: Int
    private var carry: [UInt8] = []
    private var skipped = 0
    private var skipping = false
    /// Bytes of the file consumed so far (the offset the next fed byte has).
    package private(set) var offset: Int64
    /// The number of the last line handed out.
    package private(set) var lineNumber: Int

    /// Creates a splitter.
    /// - Parameters:
    ///   - maxLineBytes: the longest line kept whole, newline included (≥ 2).
    ///   - offset: where in the file the first fed byte is (the start of a line).
    ///   - lineNumber: how many lines come before `offset`.
    package init(maxLineBytes: Int, offset: Int64 = 0, lineNumber: Int = 0) {
        self.maxLineBytes = max(2, maxLineBytes)
        self.offset = offset
        self.lineNumber = lineNumber
    }

    /// Feeds the next bytes of the file; `body` gets each line they complete, in order, and
    /// returns false to stop (the rest of `bytes` is then not consumed: `offset` is just past the
    /// last line handed out).
    /// - Returns: false when `body` stopped it.
    package mutating func feed(_ bytes: UnsafeRawBufferPointer, _ body: (Line) -> Bool) -> Bool {
        var start = 0
        while start < bytes.count {
            guard let newline = bytes[start...].firstIndex(of: 0x0A) else {
                keep(bytes, start..<bytes.count)
                offset += Int64(bytes.count - start)
                return true
            }
            keep(bytes, start..<newline)
            offset += Int64(newline + 1 - start)
            start = newline + 1
            lineNumber += 1
            let content: Line.Content
            if skipping {
                content = .tooLong(prefix: carry, length: skipped + 1)
            } else {
                if carry.last == 0x0D { carry.removeLast() }
                content = .bytes(carry)
            }
            carry.removeAll(keepingCapacity: true)
            skipped = 0
            skipping = false
            if !body(Line(number: lineNumber, end: offset, content: content)) { return false }
        }
        return true
    }

    /// The end of the file: what was left after the last newline, if anything.
    package mutating func finish() -> Line? {
        guard !carry.isEmpty || skipping else { return nil }
        lineNumber += 1
        defer {
            carry.removeAll()
            skipped = 0
            skipping = false
        }
        return Line(number: lineNumber, end: offset, content: .torn(carry))
    }

    private mutating func keep(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) {
        guard !range.isEmpty else { return }
        if !skipping && carry.count + range.count + 1 <= maxLineBytes {
            carry.append(contentsOf: bytes[range])
            return
        }
        if !skipping {
            skipping = true
            skipped = carry.count
            if carry.count > Self.keptPrefixBytes { carry.removeSubrange(Self.keptPrefixBytes...) }
        }
        let room = Self.keptPrefixBytes - carry.count
        if room > 0 { carry.append(contentsOf: bytes[range.lowerBound..<min(range.upperBound, range.lowerBound + room)]) }
        skipped += range.count
    }
}
