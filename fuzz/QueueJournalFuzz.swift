// libFuzzer entry point: the offline queue's on-disk reader (journal segments and the cursor
// file) from arbitrary bytes, as a damaged or crafted file would present them. Every record
// the scanner reports must lie inside the input with numbers under the ceiling, decode or fail
// with a typed error; the cursor decodes to nil or to numbers under the ceiling.
// Built by fuzz/run.sh from Sources/TinyFire/OfflineQueue/OfflineQueueJournal.swift;
// Tests/TinyFireTests/FuzzRegressionTests.swift replays fuzz/corpus-queue the same way.

/// One input: the bytes of a journal segment, also read as a `state` (cursor) file.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzQueueJournal(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    for item in OfflineQueueJournal.scan(bytes) {
        switch item {
        case .damaged(let range, _):
            precondition(range.lowerBound >= 0 && range.upperBound <= size && !range.isEmpty)
        case .record(let offset, let header):
            precondition(offset >= 0 && offset + header.recordLength <= size)
            precondition(header.sequence <= OfflineQueueJournal.maxStoredNumber)
            let start = offset + OfflineQueueJournal.headerLength
            if let payload = try? OfflineQueueJournal.decodePayload(
                UnsafeRawBufferPointer(rebasing: bytes[start..<offset + header.recordLength]))
            {
                _ = OfflineQueueJournal.validate(payload)
            }
        }
    }
    if let cursor = OfflineQueueJournal.decodeCursor(bytes) {
        precondition(cursor.generation <= OfflineQueueJournal.maxStoredNumber)
    }
    return 0
}
