// libFuzzer entry point: drives ResponseParser and ContentDecoder from arbitrary bytes.
// Built by fuzz/run.sh with `swiftc -sanitize=fuzzer,address` from Sources/TinyFire/HTTP.

/// Input layout: byte 0 picks the options (HEAD request or not, piece size, small limits),
/// the rest is the response as it would arrive from the socket.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzResponseParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    let options = data[0]
    let input = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let isHead = options & 1 != 0
    let piece = [1, 2, 7, 64, 4096, Int.max][Int(options >> 1) % 6]
    let limits =
        options & 0x80 != 0
        ? ResponseParser.Limits(maxHeaderBlockBytes: 256, maxChunkLineBytes: 32)
        : ResponseParser.Limits()
    var parser = ResponseParser(isHeadRequest: isHead, limits: limits)
    var decoder: ContentDecoder?
    var decodedBytes = 0
    let decodedLimit = 1 << 20
    var start = 0
    do {
        outer: while start < input.count {
            let end = min(input.count, start + piece)
            let chunk = UnsafeRawBufferPointer(rebasing: input[start..<end])
            var offset = 0
            while true {
                let (consumed, event) = try parser.parse(UnsafeRawBufferPointer(rebasing: chunk[offset...]))
                let base = offset
                offset += consumed
                precondition(offset <= chunk.count, "parser consumed more than it was given")
                switch event {
                case .needMore:
                    precondition(offset == chunk.count, "needMore with input left")
                    start = end
                    continue outer
                case .informational(let head):
                    precondition(head.status >= 100 && head.status < 200)
                case .head(let head):
                    if let coding = try? ContentCoding.from(headerValues: head.listValues("Content-Encoding")) {
                        decoder = try? ContentDecoder(coding: coding, outputCapacity: 4096)
                    }
                case .body(let range):
                    precondition(range.lowerBound >= 0 && range.upperBound <= chunk.count - base)
                    let body = UnsafeRawBufferPointer(rebasing: chunk[(base + range.lowerBound)..<(base + range.upperBound)])
                    try decoder?.decode(body) { out in
                        decodedBytes += out.count
                        if decodedBytes > decodedLimit { throw FuzzStop() }
                    }
                case .end:
                    break outer
                }
            }
        }
        if !parser.isComplete { _ = try parser.inputEnded() }
        try decoder?.finish()
    } catch {
        // Every rejection must be a typed, describable error.
        _ = "\(error)"
    }
    return 0
}

struct FuzzStop: Error {}
