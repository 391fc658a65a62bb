// Foundation's `InputStream` in TinyFire's uploads, as Alamofire spells them:
// `upload(_ stream: InputStream, …)` and `MultipartFormData.append(_ stream: InputStream, …)`.
//
// A module of its own because `InputStream` is in full Foundation, not FoundationEssentials:
// TinyFire and fire-agent never link full Foundation (its ICU data adds 48 MiB to a static
// binary). Code that uploads `InputStream`s imports this module beside TinyFire.

import Foundation
import TinyFire

/// Foundation's `InputStream` as an `UploadByteStream`: opened on the first read, read on a
/// background queue 64 KiB at a time, closed at its end. A stream is read once.
public final class InputStreamUploadStream: UploadByteStream, @unchecked Sendable {
    private let stream: InputStream
    private let lock = NSLock()
    private var opened = false
    private var finished = false

    /// Wraps a stream that has not been opened or read yet.
    /// - Parameter stream: the stream.
    public init(_ stream: InputStream) {
        self.stream = stream
    }

    deinit {
        if opened && !finished { stream.close() }
    }

    /// Reads the next bytes.
    /// - Parameter buffer: where to put them.
    /// - Returns: the bytes read; 0 at the end of the stream.
    /// - Throws: `InputStreamReadError` with the stream's error.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        lock.lock()
        defer { lock.unlock() }
        guard !finished, let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        if !opened {
            stream.open()
            opened = true
        }
        let count = stream.read(base.assumingMemoryBound(to: UInt8.self), maxLength: buffer.count)
        if count < 0 {
            finished = true
            stream.close()
            throw InputStreamReadError(underlying: stream.streamError)
        }
        if count == 0 {
            finished = true
            stream.close()
        }
        return count
    }
}

/// An `InputStream` that failed while it was read.
public struct InputStreamReadError: Error, CustomStringConvertible {
    /// The stream's error, if it gave one.
    public let underlying: (any Error)?

    /// "the input stream failed: …".
    public var description: String {
        "the input stream failed: \(underlying.map { "\($0)" } ?? "no error given")"
    }
}

extension Session {
    /// Creates a request that sends `stream` as its body, chunked (see
    /// `upload(_:to:method:headers:interceptor:fileManager:requestModifier:)` with an
    /// `UploadByteStream`: two 64 KiB buffers whatever the length; read once, so a retry or a
    /// 307/308 redirect fails).
    /// - Parameters:
    ///   - stream: the body.
    ///   - convertible: the URL.
    ///   - method: the method; default POST.
    ///   - headers: headers added to the session's defaults.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: accepted for Alamofire's signature; unused.
    ///   - requestModifier: changes the request after it is built.
    /// - Returns: the request.
    public func upload(
        _ stream: InputStream, to convertible: any URLConvertible, method: HTTPMethod = .post, headers: HTTPHeaders? = nil,
        interceptor: (any RequestInterceptor)? = nil, fileManager: FileManager = .default, requestModifier: RequestModifier? = nil
    ) -> UploadRequest {
        upload(
            InputStreamUploadStream(stream) as any UploadByteStream, to: convertible, method: method, headers: headers,
            interceptor: interceptor, requestModifier: requestModifier)
    }

    /// Creates a request that sends `stream` as the body of `convertible`'s request.
    /// - Parameters:
    ///   - stream: the body.
    ///   - convertible: builds the request.
    ///   - interceptor: this request's interceptor.
    ///   - fileManager: accepted for Alamofire's signature; unused.
    /// - Returns: the request.
    public func upload(
        _ stream: InputStream, with convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)? = nil,
        fileManager: FileManager = .default
    ) -> UploadRequest {
        upload(InputStreamUploadStream(stream) as any UploadByteStream, with: convertible, interceptor: interceptor)
    }
}

extension MultipartFormData {
    /// Appends a part read from `stream` when the form is encoded, with the part headers
    /// Alamofire writes (`Content-Disposition` with the name and file name, `Content-Type`).
    /// - Parameters:
    ///   - stream: the part's bytes.
    ///   - length: how many bytes it gives; a stream that ends early fails the upload with
    ///     `.bodyPartLengthMismatch`.
    ///   - name: the form field name.
    ///   - fileName: the file name to announce.
    ///   - mimeType: the part's `Content-Type`.
    public func append(_ stream: InputStream, withLength length: UInt64, name: String, fileName: String, mimeType: String) {
        append(InputStreamUploadStream(stream), withLength: length, name: name, fileName: fileName, mimeType: mimeType)
    }

    /// Appends a part read from `stream`, with the headers given.
    /// - Parameters:
    ///   - stream: the part's bytes.
    ///   - length: how many bytes it gives.
    ///   - headers: the part's headers.
    public func append(_ stream: InputStream, withLength length: UInt64, headers: HTTPHeaders) {
        append(InputStreamUploadStream(stream), withLength: length, headers: headers)
    }
}

extension CharacterSet {
    /// The characters Alamofire leaves unescaped in a query (RFC 3986's query characters
    /// without `:#[]@!$&'()*+,;=`), as Alamofire's `CharacterSet.afURLQueryAllowed`; the same
    /// set as `URLEncodedFormEncoder.defaultAllowedBytes`.
    public static let afURLQueryAllowed: CharacterSet = {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: ":#[]@!$&'()*+,;=")
        return allowed
    }()
}

extension URLEncodedFormEncoder.DateEncoding {
    /// Dates written by a `DateFormatter`, as Alamofire's `.formatted(DateFormatter)`.
    /// - Parameter formatter: the formatter; not mutated afterwards (it is used from the
    ///   encoding thread).
    /// - Returns: the encoding.
    public static func formatted(_ formatter: DateFormatter) -> URLEncodedFormEncoder.DateEncoding {
        .custom { [formatter = UncheckedFormatter(formatter)] date in formatter.value.string(from: date) }
    }
}

/// A `DateFormatter` handed to a `@Sendable` closure: formatters are thread-safe for
/// formatting once configured.
private struct UncheckedFormatter: @unchecked Sendable {
    let value: DateFormatter
    init(_ value: DateFormatter) { self.value = value }
}

extension URLEncodedFormEncoder {
    /// An encoder spelled as Alamofire's, with the characters left unescaped as a
    /// `CharacterSet` (`.afURLQueryAllowed` is the default set). The encoder works on bytes: the
    /// ASCII characters in the set are kept, every other byte of the UTF-8 text (all of a
    /// non-ASCII character's) is percent-escaped, as Alamofire's output is for them.
    /// - Parameters:
    ///   - alphabetizeKeyValuePairs: sort pairs; default true.
    ///   - arrayEncoding: default `.brackets`.
    ///   - boolEncoding: default `.numeric`.
    ///   - dataEncoding: default `.base64`.
    ///   - dateEncoding: default `.deferredToDate`.
    ///   - keyEncoding: default `.useDefaultKeys`.
    ///   - keyPathEncoding: default `.brackets`.
    ///   - nilEncoding: default `.dropKey`.
    ///   - spaceEncoding: default `.percentEscaped`.
    ///   - allowedCharacters: the characters written as themselves.
    public convenience init(
        alphabetizeKeyValuePairs: Bool = true,
        arrayEncoding: ArrayEncoding = .brackets,
        boolEncoding: BoolEncoding = .numeric,
        dataEncoding: DataEncoding = .base64,
        dateEncoding: DateEncoding = .deferredToDate,
        keyEncoding: KeyEncoding = .useDefaultKeys,
        keyPathEncoding: KeyPathEncoding = .brackets,
        nilEncoding: NilEncoding = .dropKey,
        spaceEncoding: SpaceEncoding = .percentEscaped,
        allowedCharacters: CharacterSet
    ) {
        var bytes = Set<UInt8>()
        for byte in UInt8(0)..<128 where allowedCharacters.contains(Unicode.Scalar(byte)) { bytes.insert(byte) }
        self.init(
            alphabetizeKeyValuePairs: alphabetizeKeyValuePairs, arrayEncoding: arrayEncoding, boolEncoding: boolEncoding,
            dataEncoding: dataEncoding, dateEncoding: dateEncoding, keyEncoding: keyEncoding, keyPathEncoding: keyPathEncoding,
            nilEncoding: nilEncoding, spaceEncoding: spaceEncoding, allowedBytes: bytes)
    }
}
