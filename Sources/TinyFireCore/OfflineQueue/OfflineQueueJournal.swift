import CZlib

/// The offline queue's on-disk format, without I/O: records and the cursor encoded to bytes
/// and decoded back, and a scanner that finds every intact record in a journal segment even
/// when bytes between them are torn or corrupt. docs/OFFLINE.md describes the same format.
///
/// A record is a 32-byte header and a payload, little-endian:
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 4 | magic `TFQ1` |
/// | 4 | 4 | payload length (at most `maxPayloadLength`) |
/// | 8 | 8 | sequence number |
/// | 16 | 8 | enqueue time, milliseconds since 1970 |
/// | 24 | 4 | CRC-32 of the payload |
/// | 28 | 4 | CRC-32 of bytes 0..<28 |
///
/// The payload holds the request: a version byte (2), then length-prefixed method, URL,
/// idempotency key, headers and body (inline bytes, or the name and length of a body file),
/// then the enqueue moment on the boot clock: a flag byte (1 when present), the 16-byte boot
/// id and the milliseconds since boot. Version 1 payloads (without the boot clock) are still
/// read.
package enum OfflineQueueJournal {
    package static let magic: [UInt8] = Array("TFQ1".utf8)
    package static let headerLength = 32
    /// The largest payload accepted: 1 MiB (inline bodies are far smaller; see
    /// `OfflineQueue.Configuration.maximumInlineBodyLimit`).
    package static let maxPayloadLength = 1 << 20
    package static let payloadVersion: UInt8 = 2

    /// A decoded record header.
    package struct Header: Equatable, Sendable {
        package var payloadLength: Int
        package var sequence: UInt64
        package var enqueuedAtMilliseconds: UInt64
        package var payloadChecksum: UInt32

        package var recordLength: Int { OfflineQueueJournal.headerLength + payloadLength }
    }

    /// The request a record holds.
    package struct Payload: Equatable, Sendable {
        package var method: String
        package var url: String
        package var idempotencyKey: String
        package var headers: [(name: String, value: String)]
        package var body: Body
        /// When it was enqueued on the boot clock (nil in version 1 records, or without a boot id).
        package var enqueuedOnBootClock: BootInstant? = nil

        package init(
            method: String, url: String, idempotencyKey: String, headers: [(name: String, value: String)], body: Body,
            enqueuedOnBootClock: BootInstant? = nil
        ) {
            self.method = method
            self.url = url
            self.idempotencyKey = idempotencyKey
            self.headers = headers
            self.body = body
            self.enqueuedOnBootClock = enqueuedOnBootClock
        }

        package static func == (lhs: Payload, rhs: Payload) -> Bool {
            lhs.method == rhs.method && lhs.url == rhs.url && lhs.idempotencyKey == rhs.idempotencyKey
                && lhs.headers.map { [$0.name, $0.value] } == rhs.headers.map { [$0.name, $0.value] } && lhs.body == rhs.body
                && lhs.enqueuedOnBootClock == rhs.enqueuedOnBootClock
        }
    }

    /// Where a record's body is.
    package enum Body: Equatable, Sendable {
        case none
        case inline([UInt8])
        /// A file in the queue's `bodies` directory, and its length.
        case file(name: String, length: UInt64)

        package var length: UInt64 {
            switch self {
            case .none: return 0
            case .inline(let bytes): return UInt64(bytes.count)
            case .file(_, let length): return length
            }
        }

        /// Bytes it takes in a payload: the body itself when inline; a file body only names
        /// its file (its bytes count against the queue's byte bound, not the record's).
        package var encodedLength: Int {
            switch self {
            case .none: return 1
            case .inline(let bytes): return 1 + 4 + bytes.count
            case .file(let name, _): return 1 + 1 + name.utf8.count + 8
            }
        }
    }

    /// Why a payload could not be decoded.
    package struct DecodeError: Error, Equatable, CustomStringConvertible {
        package var description: String

        package init(description: String) { self.description = description }
    }

    // MARK: - Records

    /// The bytes of one record.
    package static func encode(sequence: UInt64, enqueuedAtMilliseconds: UInt64, payload: Payload) -> [UInt8] {
        let body = encodePayload(payload)
        return encodeHeader(
            payloadLength: body.count, sequence: sequence, enqueuedAtMilliseconds: enqueuedAtMilliseconds,
            payloadChecksum: checksum(body[...])) + body
    }

    /// A record's 32-byte header.
    package static func encodeHeader(
        payloadLength: Int, sequence: UInt64, enqueuedAtMilliseconds: UInt64, payloadChecksum: UInt32
    ) -> [UInt8] {
        var header = magic
        header.reserveCapacity(headerLength)
        appendInteger(UInt64(payloadLength), bytes: 4, to: &header)
        appendInteger(sequence, bytes: 8, to: &header)
        appendInteger(enqueuedAtMilliseconds, bytes: 8, to: &header)
        appendInteger(UInt64(payloadChecksum), bytes: 4, to: &header)
        appendInteger(UInt64(checksum(header[0..<28])), bytes: 4, to: &header)
        return header
    }

    /// A record's payload: the request, without the header.
    package static func encodePayload(_ payload: Payload) -> [UInt8] {
        var body: [UInt8] = [payloadVersion]
        appendString(payload.method, lengthBytes: 1, to: &body)
        appendString(payload.url, lengthBytes: 2, to: &body)
        appendString(payload.idempotencyKey, lengthBytes: 1, to: &body)
        appendInteger(UInt64(payload.headers.count), bytes: 2, to: &body)
        for header in payload.headers {
            appendString(header.name, lengthBytes: 2, to: &body)
            appendString(header.value, lengthBytes: 2, to: &body)
        }
        switch payload.body {
        case .none:
            body.append(0)
        case .inline(let bytes):
            body.append(1)
            appendInteger(UInt64(bytes.count), bytes: 4, to: &body)
            body.append(contentsOf: bytes)
        case .file(let name, let length):
            body.append(2)
            appendString(name, lengthBytes: 1, to: &body)
            appendInteger(length, bytes: 8, to: &body)
        }
        if let instant = payload.enqueuedOnBootClock, instant.bootID.count == 16 {
            body.append(1)
            body.append(contentsOf: instant.bootID)
            appendInteger(instant.uptimeMilliseconds, bytes: 8, to: &body)
        } else {
            body.append(0)
        }
        return body
    }

    /// Whether encoding `payload` fits the format's limits (string lengths, header count,
    /// payload size); the reason when it does not.
    package static func validate(_ payload: Payload) -> String? {
        if payload.method.utf8.count > 0xFF { return "the method is longer than 255 bytes" }
        if payload.url.utf8.count > 0xFFFF { return "the URL is longer than 65,535 bytes" }
        if payload.idempotencyKey.utf8.count > 0xFF { return "the idempotency key is longer than 255 bytes" }
        if payload.headers.count > 0xFFFF { return "more than 65,535 header fields" }
        for header in payload.headers where header.name.utf8.count > 0xFFFF || header.value.utf8.count > 0xFFFF {
            return "header \(header.name) is longer than 65,535 bytes"
        }
        if case .file(let name, _) = payload.body, name.utf8.count > 0xFF { return "the body file name is too long" }
        let size =
            1 + 1 + payload.method.utf8.count + 2 + payload.url.utf8.count + 1 + payload.idempotencyKey.utf8.count + 2
            + payload.headers.reduce(0) { $0 + 4 + $1.name.utf8.count + $1.value.utf8.count } + payload.body.encodedLength + 25
        if size > maxPayloadLength { return "the record would be \(size) bytes; the limit is \(maxPayloadLength)" }
        return nil
    }

    /// The largest number the queue accepts from disk: sequence numbers, times, cursor
    /// generations and counters (2^62). One enqueue a microsecond would take 146,000 years to
    /// reach it, so anything larger is damage or a crafted file, quarantined like a bad
    /// checksum; and below it, no `+ 1` the queue does can overflow.
    package static let maxStoredNumber: UInt64 = 1 << 62

    /// The header at `offset` if it is intact: magic, header checksum, a payload length within
    /// bounds and numbers no larger than `maxStoredNumber`. The payload is not checked.
    package static func header(in bytes: UnsafeRawBufferPointer, at offset: Int) -> Header? {
        guard offset >= 0, bytes.count - offset >= headerLength else { return nil }
        guard bytes[offset] == magic[0], bytes[offset + 1] == magic[1], bytes[offset + 2] == magic[2], bytes[offset + 3] == magic[3]
        else { return nil }
        let stored = UInt32(readInteger(bytes, at: offset + 28, bytes: 4))
        guard checksum(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 28])) == stored else { return nil }
        let length = Int(readInteger(bytes, at: offset + 4, bytes: 4))
        guard length <= maxPayloadLength else { return nil }
        let sequence = readInteger(bytes, at: offset + 8, bytes: 8)
        let enqueuedAt = readInteger(bytes, at: offset + 16, bytes: 8)
        guard sequence >= 1, sequence <= maxStoredNumber, enqueuedAt <= maxStoredNumber else { return nil }
        return Header(
            payloadLength: length, sequence: sequence, enqueuedAtMilliseconds: enqueuedAt,
            payloadChecksum: UInt32(readInteger(bytes, at: offset + 24, bytes: 4)))
    }

    /// The header at `offset` when the whole record is intact (its payload present and
    /// matching its checksum).
    package static func intactRecord(in bytes: UnsafeRawBufferPointer, at offset: Int) -> Header? {
        guard let header = header(in: bytes, at: offset), bytes.count - offset - headerLength >= header.payloadLength else { return nil }
        let start = offset + headerLength
        let payload = UnsafeRawBufferPointer(rebasing: bytes[start..<start + header.payloadLength])
        return checksum(payload) == header.payloadChecksum ? header : nil
    }

    /// Whether the bytes from `offset` to the end are an append cut short: fewer bytes than a
    /// header that begin as one (the magic, as far as it goes), or an intact header whose record
    /// runs past the end. That is what a process killed
    /// inside its `pwrite` leaves (the kernel stops a write between pages on SIGKILL). Such a
    /// record was never acknowledged (an append returns after its `fdatasync`), so nothing in it
    /// was accepted. A whole-length record with a bad checksum is not this: it is damage.
    package static func isUnfinishedAppend(in bytes: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        guard offset >= 0, offset < bytes.count else { return false }
        if bytes.count - offset < headerLength {
            return (0..<min(magic.count, bytes.count - offset)).allSatisfy { bytes[offset + $0] == magic[$0] }
        }
        guard let header = header(in: bytes, at: offset) else { return false }
        return bytes.count - offset < header.recordLength
    }

    /// Decodes a payload (checksum already verified).
    package static func decodePayload(_ bytes: UnsafeRawBufferPointer) throws(DecodeError) -> Payload {
        var reader = Reader(bytes: bytes)
        let version = try reader.integer(1)
        guard version == 1 || version == UInt64(payloadVersion) else { throw DecodeError(description: "unknown payload version") }
        let method = try reader.string(lengthBytes: 1)
        let url = try reader.string(lengthBytes: 2)
        let key = try reader.string(lengthBytes: 1)
        let count = Int(try reader.integer(2))
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(count)
        for _ in 0..<count {
            let name = try reader.string(lengthBytes: 2)
            headers.append((name, try reader.string(lengthBytes: 2)))
        }
        let body: Body
        switch try reader.integer(1) {
        case 0: body = .none
        case 1: body = .inline(try reader.bytes(Int(try reader.integer(4))))
        case 2:
            let name = try reader.string(lengthBytes: 1)
            guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else {
                throw DecodeError(description: "invalid body file name")
            }
            body = .file(name: name, length: try reader.integer(8))
        default: throw DecodeError(description: "unknown body kind")
        }
        var instant: BootInstant?
        if version >= 2 {
            switch try reader.integer(1) {
            case 0: break
            case 1:
                let id = try reader.bytes(16)
                let uptime = try reader.integer(8)
                guard uptime <= maxStoredNumber else { throw DecodeError(description: "boot clock out of range") }
                instant = BootInstant(bootID: id, uptimeMilliseconds: uptime)
            default: throw DecodeError(description: "unknown boot clock flag")
            }
        }
        guard reader.offset == bytes.count else { throw DecodeError(description: "trailing bytes after the body") }
        return Payload(method: method, url: url, idempotencyKey: key, headers: headers, body: body, enqueuedOnBootClock: instant)
    }

    // MARK: - Scanning

    /// What a scan of one segment found, in file order.
    package enum ScanEntry: Equatable, Sendable {
        /// An intact record at `offset`.
        case record(offset: Int, header: Header)
        /// Bytes that are not an intact record; `atEnd` when nothing intact follows them.
        case damaged(range: Range<Int>, atEnd: Bool)
    }

    /// Finds every intact record in `bytes`. After damage, the scan moves byte by byte to the
    /// next offset where a whole record (magic, both checksums) starts, so one bad record never
    /// hides the ones behind it.
    package static func scan(_ bytes: UnsafeRawBufferPointer) -> [ScanEntry] {
        var entries: [ScanEntry] = []
        var offset = 0
        while offset < bytes.count {
            if let header = intactRecord(in: bytes, at: offset) {
                entries.append(.record(offset: offset, header: header))
                offset += header.recordLength
                continue
            }
            var next = offset + 1
            while next < bytes.count, intactRecord(in: bytes, at: next) == nil { next += 1 }
            entries.append(.damaged(range: offset..<next, atEnd: next >= bytes.count))
            offset = next
        }
        return entries
    }

    // MARK: - Cursor

    /// The queue's progress and counters, kept in the `state` file in two alternating slots
    /// (a torn slot write leaves the other one intact).
    package struct Cursor: Equatable, Sendable {
        /// Increases with every write; the slot with the higher valid one wins.
        package var generation: UInt64 = 0
        /// Every record with a sequence number up to this one has been removed.
        package var removedThrough: UInt64 = 0
        package var delivered: UInt64 = 0
        package var droppedOldest: UInt64 = 0
        package var rejectedNew: UInt64 = 0
        package var discarded: UInt64 = 0
        package var quarantined: UInt64 = 0

        package init(
            generation: UInt64 = 0, removedThrough: UInt64 = 0, delivered: UInt64 = 0, droppedOldest: UInt64 = 0,
            rejectedNew: UInt64 = 0, discarded: UInt64 = 0, quarantined: UInt64 = 0
        ) {
            self.generation = generation
            self.removedThrough = removedThrough
            self.delivered = delivered
            self.droppedOldest = droppedOldest
            self.rejectedNew = rejectedNew
            self.discarded = discarded
            self.quarantined = quarantined
        }
    }

    package static let cursorMagic: [UInt8] = Array("TFQS".utf8)
    package static let cursorSlotLength = 80

    /// One slot's bytes.
    package static func encode(_ cursor: Cursor) -> [UInt8] {
        var slot = cursorMagic
        appendInteger(1, bytes: 4, to: &slot)
        for value in [
            cursor.generation, cursor.removedThrough, cursor.delivered, cursor.droppedOldest, cursor.rejectedNew, cursor.discarded,
            cursor.quarantined,
        ] {
            appendInteger(value, bytes: 8, to: &slot)
        }
        appendInteger(UInt64(checksum(slot[...])), bytes: 4, to: &slot)
        slot.append(contentsOf: [UInt8](repeating: 0, count: cursorSlotLength - slot.count))
        return slot
    }

    /// The newest intact slot of a `state` file (magic, version, checksum, every number at most
    /// `maxStoredNumber`), or nil when neither is intact.
    package static func decodeCursor(_ bytes: UnsafeRawBufferPointer) -> Cursor? {
        var best: Cursor?
        for slot in 0..<2 {
            let start = slot * cursorSlotLength
            guard bytes.count >= start + 68 else { continue }
            let fields = UnsafeRawBufferPointer(rebasing: bytes[start..<start + 64])
            guard Array(fields.prefix(4)) == cursorMagic, readInteger(fields, at: 4, bytes: 4) == 1,
                UInt32(readInteger(bytes, at: start + 64, bytes: 4)) == checksum(fields)
            else { continue }
            let values = (0..<7).map { readInteger(fields, at: 8 + $0 * 8, bytes: 8) }
            // A number past the ceiling is not a slot the queue wrote: not intact.
            guard values.allSatisfy({ $0 <= maxStoredNumber }) else { continue }
            let cursor = Cursor(
                generation: values[0], removedThrough: values[1], delivered: values[2], droppedOldest: values[3],
                rejectedNew: values[4], discarded: values[5], quarantined: values[6])
            if let current = best, current.generation >= cursor.generation { continue }
            best = cursor
        }
        return best
    }

    // MARK: - Bytes

    package static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }

    package static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return UInt32(crc32(0, nil, 0)) }
        return UInt32(crc32(0, base.assumingMemoryBound(to: UInt8.self), uInt(bytes.count)))
    }

    package static func appendInteger(_ value: UInt64, bytes: Int, to buffer: inout [UInt8]) {
        for index in 0..<bytes { buffer.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(index)))) }
    }

    package static func readInteger(_ bytes: UnsafeRawBufferPointer, at offset: Int, bytes count: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<count { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
        return value
    }

    private static func appendString(_ string: String, lengthBytes: Int, to buffer: inout [UInt8]) {
        let utf8 = Array(string.utf8)
        appendInteger(UInt64(utf8.count), bytes: lengthBytes, to: &buffer)
        buffer.append(contentsOf: utf8)
    }

    private struct Reader {
        package let bytes: UnsafeRawBufferPointer
        package var offset = 0

        package mutating func integer(_ count: Int) throws(DecodeError) -> UInt64 {
            guard bytes.count - offset >= count else { throw DecodeError(description: "truncated payload") }
            defer { offset += count }
            return OfflineQueueJournal.readInteger(bytes, at: offset, bytes: count)
        }

        package mutating func bytes(_ count: Int) throws(DecodeError) -> [UInt8] {
            guard count >= 0, bytes.count - offset >= count else { throw DecodeError(description: "truncated payload") }
            defer { offset += count }
            return Array(bytes[offset..<offset + count])
        }

        package mutating func string(lengthBytes: Int) throws(DecodeError) -> String {
            let raw = try bytes(Int(try integer(lengthBytes)))
            guard let string = String(validating: raw, as: UTF8.self) else { throw DecodeError(description: "invalid UTF-8") }
            return string
        }
    }
}
