import Dispatch
import HTTPTypes
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A `DataRequest` that sends a body (Alamofire's `UploadRequest`): from memory, from a file
/// through sendfile or a fixed 64 KiB buffer, from a stream in 64 KiB chunks, or a multipart
/// form. Memory does not grow with a file, stream or spilled multipart body.
public final class UploadRequest: DataRequest, @unchecked Sendable {
    /// What the body is made of.
    public enum Uploadable: Sendable {
        /// Bytes in memory: the `URLRequest`'s `httpBody` as adapted (a compressor may change
        /// it), or these bytes when an adapter left the request without one.
        case data(Data)
        /// A file, read as it is sent; its size at the start of each attempt is the
        /// `Content-Length`, and a file that changes size mid-upload fails the request.
        /// `shouldRemove` is true for a multipart form's spill file, which the request removes
        /// when it finishes (as Alamofire's).
        case file(URL, shouldRemove: Bool)
        /// A stream of unknown length, sent with `Transfer-Encoding: chunked`. A stream is read
        /// once: a retry or a 307/308 redirect fails with `.requestBodyReadFailed`.
        case stream(any UploadByteStream)
        /// A multipart form, not encoded yet (see `MultipartFormData`).
        case multipart(MultipartFormData)
    }

    /// The body's source. A multipart form is `.multipart` until the request encodes it, then,
    /// as in Alamofire, `.data` (encoded in memory, below the threshold) or
    /// `.file(_, shouldRemove: true)` (spilled to a temporary file, removed when the request
    /// finishes; file parts are not copied into it but sent from their own files). nil when it
    /// could not be made (a part that cannot be read: the request fails with
    /// `.multipartEncodingFailed`), as Alamofire's.
    public var uploadable: Uploadable? { body.creationFailed ? nil : body.encodedUploadable ?? body.uploadable }
    let body: UploadBody

    init(
        session: Session, convertible: any URLRequestConvertible, interceptor: (any RequestInterceptor)?, uploadable: Uploadable,
        multipartThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold
    ) {
        body = UploadBody(uploadable, multipartThreshold: multipartThreshold)
        super.init(session: session, convertible: convertible, interceptor: interceptor)
    }

    override func prepare(_ spec: inout RequestSpec) throws(TinyFireError) {
        do {
            try body.apply(to: &spec)
        } catch .multipartEncodingFailed(let reason) {
            body.markCreationFailed()
            // As Alamofire's: an encoding failure is reported as it is (a TinyFireError is not
            // wrapped in `.createUploadableFailed`).
            throw .multipartEncodingFailed(reason: reason)
        }
        if isFinished { body.release() }  // cancelled while a multipart body was encoded
    }

    override func didFinishPipeline() {
        // Success, failure or cancellation: the spilled encoding is not needed any more.
        body.release()
    }

    /// The temporary file holding the spilled part of a multipart body while the request
    /// runs; nil for bodies encoded in memory, and once the request finished.
    public var multipartTemporaryFile: URL? { body.temporaryFile }

    override var uploadBody: UploadBody? { body }
}

/// A request body that is not the `URLRequest`'s `httpBody`, prepared for each attempt:
/// a file, a stream (claimed once), or a multipart form encoded on the first attempt and
/// kept until the request finishes.
final class UploadBody: Sendable {
    let uploadable: UploadRequest.Uploadable
    private let multipartThreshold: UInt64
    private let streamSource: StreamBodySource?
    private let encodedMultipart = Mutex<MultipartFormData.EncodedBody?>(nil)
    private let encodedForm = Mutex<UploadRequest.Uploadable?>(nil)
    private let failed = Atomic<Bool>(false)

    /// Whether making the body failed (`UploadRequest.uploadable` is nil then).
    var creationFailed: Bool { failed.load(ordering: .acquiring) }

    /// Records that making the body failed.
    func markCreationFailed() { failed.store(true, ordering: .releasing) }

    init(_ uploadable: UploadRequest.Uploadable, multipartThreshold: UInt64 = MultipartFormData.encodingMemoryThreshold) {
        self.uploadable = uploadable
        self.multipartThreshold = multipartThreshold
        if case .stream(let stream) = uploadable {
            streamSource = StreamBodySource(UploadStreamSource(stream))
        } else {
            streamSource = nil
        }
    }

    /// Sets `spec`'s body for one attempt.
    func apply(to spec: inout RequestSpec) throws(TinyFireError) {
        switch uploadable {
        case .data(let data):
            // The adapted request's body when it has one (a compressor's output); the upload's
            // own bytes when it has none: an adapter that replaces the request does not drop
            // the body (Alamofire sends the data beside the request, `uploadTask(with:from:)`).
            if spec.body == nil || spec.body?.count == 0 { spec.body = DataBody(data) }
            spec.bodySource = nil
        case .file(let url, _):
            spec.body = nil
            spec.bodySource = .segments([try RequestBodyFile.segment(regularFileAt: url.path(percentEncoded: false))])
        case .stream:
            spec.body = nil
            spec.bodySource = streamSource.map { .stream($0) }
        case .multipart(let form):
            spec.body = nil
            spec.bodySource = .segments(try encoded(form).segments)
            if spec.headers.value(for: "Content-Type") == nil {
                spec.headers.add(name: "Content-Type", value: form.contentType)
            }
        }
    }

    /// The form's encoding, made on first use and kept until `release()`.
    private func encoded(_ form: MultipartFormData) throws(TinyFireError) -> MultipartFormData.EncodedBody {
        let threshold = multipartThreshold
        let body = try encodedMultipart.withLock { existing throws(TinyFireError) -> MultipartFormData.EncodedBody in
            if let existing { return existing }
            let body = try form.encodeForUpload(threshold: threshold)
            existing = body
            return body
        }
        encodedForm.withLock { reported in
            if case .some = reported { return }
            if let file = body.temporaryFile {
                reported = .file(file, shouldRemove: true)
            } else if case .memory(let bytes)? = body.segments.first {
                reported = .data(Data(bodyBytes: bytes))
            }
        }
        return body
    }

    /// What a multipart form became once encoded (`.data` or `.file`); kept after the request
    /// finishes, as Alamofire's `uploadable`.
    var encodedUploadable: UploadRequest.Uploadable? { encodedForm.withLock { $0 } }

    /// The body as pieces to copy into an offline queue, with the Content-Type a form needs;
    /// nil for a stream (read once, it cannot be kept).
    func piecesForQueue() throws(TinyFireError) -> (segments: [BodySegment], contentType: String?)? {
        switch uploadable {
        case .data(let data): return ([.bytes(data)], nil)
        case .file(let url, _): return ([try RequestBodyFile.segment(regularFileAt: url.path(percentEncoded: false))], nil)
        case .stream: return nil
        case .multipart(let form): return (try encoded(form).segments, form.contentType)
        }
    }

    /// Removes a spilled multipart encoding (idempotent).
    func release() {
        let encoded = encodedMultipart.withLock { body -> MultipartFormData.EncodedBody? in
            defer { body = nil }
            return body
        }
        encoded?.removeTemporaryFile()
    }

    /// The spilled encoding's file, while it exists.
    var temporaryFile: URL? { encodedMultipart.withLock { $0?.temporaryFile } }
}
