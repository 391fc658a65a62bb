/// How far the agent has queued one spool file: kept on disk in the agent's own state (beside the
/// queue), so that a kill or a full queue in the middle of a file neither loses its lines nor
/// sends more of it again than the batch that was being queued, and so that lines without a
/// time keep the time the file was first read. Sans-I/O: encoded to and decoded from one line.
///
/// A record applies only to the file it was made for: same name, device, inode, size and
/// modification time. Spool files are renamed in whole and never change after; any other file
/// (a new one under the same name, one that reused the inode) starts from its first byte.
package struct SpoolProgress: Sendable, Equatable {
    /// The file's name in the spool (bytes: a name need not be UTF-8).
    package var name: SpoolName
    /// `st_dev`, `st_ino`, `st_size` and `st_mtim` (ns) of the file.
    package var device: UInt64
    /// The file's inode number.
    package var inode: UInt64
    /// The file's size in bytes.
    package var size: Int64
    /// The file's modification time, ns since the epoch.
    package var modified: Int64
    /// Bytes of the file whose lines are queued (or refused): the next line starts here.
    package var offset: Int64
    /// Lines before `offset`.
    package var lineNumber: Int
    /// The time given to lines without one, in the config's precision.
    package var stamp: Int64
    /// Refused lines ending at or before this offset are already kept in `rejected/` (and
    /// counted): read again after a kill, they are not kept or counted twice. At least `offset`.
    package var refusedThrough: Int64
    /// Refused lines of this file kept so far (the file is set aside whole past a bound).
    package var refusedLines: Int

    /// Creates a record.
    package init(
        name: SpoolName, device: UInt64, inode: UInt64, size: Int64, modified: Int64, offset: Int64, lineNumber: Int, stamp: Int64,
        refusedThrough: Int64? = nil, refusedLines: Int = 0
    ) {
        self.name = name
        self.device = device
        self.inode = inode
        self.size = size
        self.modified = modified
        self.offset = offset
        self.lineNumber = lineNumber
        self.stamp = stamp
        self.refusedThrough = max(offset, refusedThrough ?? offset)
        self.refusedLines = refusedLines
    }

    /// Whether this record is for the file with this identity.
    package func matches(device: UInt64, inode: UInt64, size: Int64, modified: Int64) -> Bool {
        self.device == device && self.inode == inode && self.size == size && self.modified == modified
    }

    /// The record as one line:
    /// `spool-progress 2 <name as hex> dev ino size mtime offset line stamp refusedThrough refusedLines`.
    package var encoded: String {
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        for byte in name.bytes { hex.append(contentsOf: [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]) }
        return "spool-progress 2 \(String(decoding: hex, as: UTF8.self)) \(device) \(inode) \(size) \(modified) \(offset) "
            + "\(lineNumber) \(stamp) \(refusedThrough) \(refusedLines)\n"
    }

    /// Reads a record written by `encoded` (or by an older version: `spool-progress 1 …`,
    /// without the refusal fields); nil for anything else (a torn or foreign file).
    package init?(encoded text: String) {
        guard text.hasSuffix("\n") else { return nil }
        let fields = text.dropLast().split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count >= 10, fields[0] == "spool-progress", fields[2].utf8.count % 2 == 0,
            (fields[1] == "1" && fields.count == 10) || (fields[1] == "2" && fields.count == 12)
        else { return nil }
        var name: [UInt8] = []
        var hex = fields[2].utf8[...]
        while !hex.isEmpty {
            guard let byte = UInt8(String(decoding: hex.prefix(2), as: UTF8.self), radix: 16) else { return nil }
            name.append(byte)
            hex = hex.dropFirst(2)
        }
        guard !name.isEmpty, !name.contains(0),
            let device = UInt64(fields[3]), let inode = UInt64(fields[4]), let size = Int64(fields[5]),
            let modified = Int64(fields[6]), let offset = Int64(fields[7]), let lineNumber = Int(fields[8]),
            let stamp = Int64(fields[9]), offset >= 0, offset <= size, lineNumber >= 0
        else { return nil }
        var refusedThrough = offset
        var refusedLines = 0
        if fields.count == 12 {
            guard let through = Int64(fields[10]), let count = Int(fields[11]), through >= offset, through <= size, count >= 0 else {
                return nil
            }
            refusedThrough = through
            refusedLines = count
        }
        self.init(
            name: SpoolName(bytes: name), device: device, inode: inode, size: size, modified: modified, offset: offset,
            lineNumber: lineNumber, stamp: stamp, refusedThrough: refusedThrough, refusedLines: refusedLines)
    }
}

/// The two-slot layout of the progress file: each write goes, with a sequence number and a
/// checksum, to the slot the last write did not use, and is made durable with one `fdatasync`
/// (no new file, no rename). A write cut short by a power loss spoils only its own slot: the
/// other still holds the record before it. Sans-I/O: slots in, record out.
package enum SpoolProgressSlots {
    /// Bytes per slot; a record (a 255-byte name in hex and nine numbers) fits with room.
    package static let slotBytes = 1024

    /// The slot's bytes for `record` (nil: no file in progress) under sequence `sequence`.
    package static func encode(_ record: SpoolProgress?, sequence: UInt64) -> [UInt8] {
        let payload = record?.encoded ?? "none\n"
        var bytes = Array("slot \(sequence) \(String(checksum(payload), radix: 16)) \(payload)".utf8)
        bytes.append(contentsOf: repeatElement(0, count: max(0, slotBytes - bytes.count)))
        return bytes
    }

    /// The newest intact slot of the file's bytes: its sequence and record (nil: none in progress).
    package static func decode(_ bytes: [UInt8]) -> (sequence: UInt64, record: SpoolProgress?)? {
        var best: (sequence: UInt64, record: SpoolProgress?)?
        var start = 0
        while start + 8 <= bytes.count {
            let slot = bytes[start..<min(bytes.count, start + slotBytes)]
            start += slotBytes
            guard let newline = slot.firstIndex(of: 0x0A),
                let text = String(validating: slot[slot.startIndex...newline], as: UTF8.self)
            else { continue }
            let fields = text.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard fields.count == 4, fields[0] == "slot", let sequence = UInt64(fields[1]), let sum = UInt64(fields[2], radix: 16),
                sum == checksum(String(fields[3]))
            else { continue }
            let payload = String(fields[3])
            let record: SpoolProgress?
            if payload == "none\n" {
                record = nil
            } else if let decoded = SpoolProgress(encoded: payload) {
                record = decoded
            } else {
                continue
            }
            if let current = best, current.sequence >= sequence { continue }
            best = (sequence, record)
        }
        return best
    }

    /// FNV-1a, 64 bits: enough to tell a torn slot from a whole one.
    package static func checksum(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }
}
