// libFuzzer entry point: Content-Range parsing from arbitrary header values. A parsed range
// is ordered, inside the complete length when one is given, and small enough that `last + 1`
// cannot overflow. Built by fuzz/run.sh from Sources/TinyFire/HTTP;
// Tests/TinyFireTests/FuzzRegressionTests.swift replays fuzz/corpus-range the same way.

/// One input: a Content-Range header value.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzContentRange(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let value = String(decoding: UnsafeRawBufferPointer(start: data, count: size), as: UTF8.self)
    guard let parsed = ContentRange(value) else { return 0 }
    if let range = parsed.range {
        precondition(range.lowerBound <= range.upperBound && range.upperBound < UInt64.max)
        if let complete = parsed.completeLength { precondition(range.upperBound < complete) }
    } else {
        precondition(parsed.completeLength != nil)
    }
    return 0
}
