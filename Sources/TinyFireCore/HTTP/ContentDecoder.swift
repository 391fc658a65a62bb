import CZlib

/// A response content coding TinyFire can decode.
public enum ContentCoding: String, Sendable, Equatable {
    /// `gzip` (RFC 1952), also spelled `x-gzip`.
    case gzip
    /// `deflate`: a zlib stream (RFC 1950); raw deflate (RFC 1951) is accepted too, as
    /// browsers and curl do, since some servers send it.
    case deflate

    /// The coding named by a `Content-Encoding` header, or nil for identity.
    /// - Parameter values: the comma-separated elements of `Content-Encoding`.
    /// - Returns: the single coding to undo, or nil when the body is not encoded.
    /// - Throws: `TinyFireError.unsupportedContentEncoding` for anything else, including
    ///   stacked codings.
    package static func from(headerValues values: [String]) throws(ContentDecodingError) -> ContentCoding? {
        let codings = values.filter { !$0.caseInsensitiveEquals("identity") }
        guard !codings.isEmpty else { return nil }
        guard codings.count == 1 else { throw .unsupported(values.joined(separator: ", ")) }
        let name = codings[0]
        if name.caseInsensitiveEquals("gzip") || name.caseInsensitiveEquals("x-gzip") { return .gzip }
        if name.caseInsensitiveEquals("deflate") { return .deflate }
        throw .unsupported(name)
    }
}

/// What went wrong undoing a content coding.
public enum ContentDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `Content-Encoding` is not one TinyFire decodes.
    case unsupported(String)
    /// zlib rejected the data; the message is zlib's own.
    case corrupt(coding: ContentCoding, message: String)
    /// The compressed stream ended before its end marker.
    case truncated(coding: ContentCoding)

    /// One line naming what went wrong.
    public var description: String {
        switch self {
        case .unsupported(let name): return "unsupported Content-Encoding \(quoted(name))"
        case .corrupt(let coding, let message): return "corrupt \(coding.rawValue) body: \(message)"
        case .truncated(let coding): return "\(coding.rawValue) body ended before its end marker"
        }
    }
}

/// Streaming zlib inflater with a fixed output buffer.
///
/// Memory: one zlib inflate state (about 7 KiB plus a 32 KiB window) and `outputCapacity`
/// bytes, allocated once. Output is handed to a closure one buffer at a time, so a gzip bomb
/// costs time, not memory; the sink behind the closure enforces byte limits.
package final class ContentDecoder {
    /// Default output buffer size: 64 KiB.
    package static let defaultOutputCapacity = 64 * 1024

    package let coding: ContentCoding
    private var stream = z_stream()
    private let output: UnsafeMutableRawBufferPointer
    private let outputStart: UnsafeMutablePointer<UInt8>
    private var initialized = false
    private var finished = false
    /// For deflate: whether the zlib-or-raw question is settled, and the header bytes seen.
    private var modeDecided = false
    private var probe: [UInt8] = []
    /// Whether any compressed byte was passed in.
    private var receivedInput = false

    /// Creates a decoder.
    /// - Parameters:
    ///   - coding: the content coding to undo.
    ///   - outputCapacity: bytes of decoded output produced per closure call, at most.
    package init(coding: ContentCoding, outputCapacity: Int = ContentDecoder.defaultOutputCapacity) throws(ContentDecodingError) {
        self.coding = coding
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, outputCapacity), alignment: 16)
        self.output = output
        // A fresh allocation of at least one byte always has a base address.
        self.outputStart = output.baseAddress.unsafelyUnwrapped.assumingMemoryBound(to: UInt8.self)
        // 15 + 32: zlib or gzip header, detected automatically.
        try start(windowBits: coding == .gzip ? 15 + 16 : 15)
    }

    deinit {
        if initialized { inflateEnd(&stream) }
        output.deallocate()
    }

    private func start(windowBits: Int32) throws(ContentDecodingError) {
        if initialized { inflateEnd(&stream) }
        stream = z_stream()
        let status = tinyfire_inflate_init2(&stream, windowBits)
        guard status == Z_OK else { throw .corrupt(coding: coding, message: zlibMessage(status)) }
        initialized = true
    }

    #if !hasFeature(Embedded)
        /// Decodes a piece of the body.
        /// - Parameters:
        ///   - input: compressed bytes.
        ///   - emit: called with each buffer of decoded bytes (valid only during the call).
        /// - Throws: `ContentDecodingError` for corrupt data, or whatever `emit` throws.
        package func decode(_ input: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
            try decode(input, corrupt: { $0 }, emit: emit)
        }
    #endif

    /// Decodes a piece of the body, with one error type for both sides (Embedded Swift has
    /// typed throws only).
    /// - Parameters:
    ///   - input: compressed bytes.
    ///   - corrupt: turns the decoder's own error into the caller's.
    ///   - emit: called with each buffer of decoded bytes (valid only during the call).
    /// - Throws: `corrupt(…)` for corrupt data, or whatever `emit` throws.
    package func decode<E: Error>(
        _ input: UnsafeRawBufferPointer, corrupt: (ContentDecodingError) -> E, emit: (UnsafeRawBufferPointer) throws(E) -> Void
    ) throws(E) {
        guard !input.isEmpty else { return }
        receivedInput = true
        var rest = input
        if coding == .deflate && !modeDecided {
            // "deflate" should be zlib-wrapped, but some servers send raw deflate: look at
            // the 2-byte zlib header (RFC 1950 §2.2) before choosing.
            let take = min(2 - probe.count, rest.count)
            probe.append(contentsOf: rest[0..<take])
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
            guard probe.count == 2 else { return }
            modeDecided = true
            let isZlib = probe[0] & 0x0F == 8 && (UInt16(probe[0]) << 8 | UInt16(probe[1])) % 31 == 0
            if !isZlib {
                do throws(ContentDecodingError) { try start(windowBits: -15) } catch { throw corrupt(error) }
            }
            let header = probe
            try header.withBytes { bytes throws(E) in try inflateAll(bytes, corrupt: corrupt, emit: emit) }
        }
        try inflateAll(rest, corrupt: corrupt, emit: emit)
    }

    private func inflateAll<E: Error>(
        _ input: UnsafeRawBufferPointer, corrupt: (ContentDecodingError) -> E, emit: (UnsafeRawBufferPointer) throws(E) -> Void
    ) throws(E) {
        guard !input.isEmpty, let base = input.baseAddress else { return }
        var offset = 0
        while offset < input.count {
            if finished {
                // A gzip file may hold several members; anything after a deflate stream's end
                // is ignored, as curl does.
                guard coding == .gzip else { return }
                let status = inflateReset(&stream)
                guard status == Z_OK else { throw corrupt(.corrupt(coding: coding, message: zlibMessage(status))) }
                finished = false
            }
            let chunk = min(input.count - offset, Int(clamping: UInt32.max))
            stream.next_in = UnsafeMutablePointer(mutating: base.advanced(by: offset).assumingMemoryBound(to: UInt8.self))
            stream.avail_in = UInt32(chunk)
            repeat {
                stream.next_out = outputStart
                stream.avail_out = UInt32(output.count)
                let status = inflate(&stream, Z_NO_FLUSH)
                let produced = output.count - Int(stream.avail_out)
                switch status {
                case Z_OK:
                    break
                case Z_BUF_ERROR:
                    if produced == 0 && stream.avail_in != 0 {
                        throw corrupt(.corrupt(coding: coding, message: "no progress"))
                    }
                case Z_STREAM_END:
                    finished = true
                default:
                    throw corrupt(.corrupt(coding: coding, message: zlibMessage(status)))
                }
                if produced > 0 {
                    try emit(UnsafeRawBufferPointer(rebasing: output[0..<produced]))
                }
                if finished || (stream.avail_in == 0 && stream.avail_out != 0) { break }
            } while true
            offset += chunk - Int(stream.avail_in)
        }
    }

    /// Checks that the compressed stream ended properly.
    /// - Throws: `ContentDecodingError.truncated` when the end marker never came.
    package func finish() throws(ContentDecodingError) {
        // An empty body with a Content-Encoding (some servers send one) decodes to nothing.
        if receivedInput && !finished { throw .truncated(coding: coding) }
    }

    private func zlibMessage(_ status: Int32) -> String {
        if let message = stream.msg { return String(cString: message) }
        switch status {
        case Z_MEM_ERROR: return "out of memory"
        case Z_DATA_ERROR: return "invalid data"
        case Z_STREAM_ERROR: return "stream error"
        case Z_NEED_DICT: return "preset dictionary required"
        default: return "zlib status \(status)"
        }
    }
}
