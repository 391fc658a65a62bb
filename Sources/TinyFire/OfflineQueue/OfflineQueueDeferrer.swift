import Dispatch

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Moves a request that failed for lack of network into an `OfflineQueue` instead of failing
/// it: the queue sends it when the network is back, in order, until the server takes it.
/// TinyFire's own interceptor; Alamofire has no durable queue.
///
/// Attaching it marks a request deferrable: pass it as the request's interceptor (or the
/// session's, for every request). It
/// - adapts: adds an `Idempotency-Key` header (the request's `id`, the same on every attempt)
///   unless the request has one, so the server can recognise a request that reached it before
///   the failure, and the queued copy;
/// - retries: when `isDeferrableError(error)` (default: `TransferError.isNetworkUnavailable`),
///   queues the request as it was created — before adapters, which run again when the queue
///   sends it — with its key and body, and ends the request with
///   `TinyFireError.requestRetryFailed(retryError: OfflineQueueDeferral, originalError:)`; read
///   it with `TinyFireError.offlineQueueDeferral`. If the queue refuses (full, disk full,
///   closed) the request fails with that `OfflineQueueError` as the retry error instead.
///
/// Bodies: `httpBody`, upload data, files (copied into the queue) and multipart forms (their
/// encoding) are kept; a stream body is read once and cannot be, so such a request is not
/// deferred (`.doNotRetry`). The response of a deferred request is not seen by the caller: defer
/// requests whose answer nobody waits for (telemetry, reports, acknowledgements).
///
/// Put an `OfflineRetrier` before it in an `Interceptor` to wait a few seconds for the network
/// first and defer only when it stays away.
public final class OfflineQueueDeferrer: RequestInterceptor, Sendable {
    /// Where deferred requests go.
    public let queue: OfflineQueue
    private let isDeferrableError: @Sendable (_ error: any Error) -> Bool

    /// Creates a deferrer.
    /// - Parameters:
    ///   - queue: the queue that takes deferred requests.
    ///   - isDeferrableError: which failures defer; default `OfflineRetrier.defaultIsOfflineError`.
    ///     Widen it (a refused connection, a 503 after `validate()`) to queue more.
    public init(
        queue: OfflineQueue, isDeferrableError: @escaping @Sendable (_ error: any Error) -> Bool = OfflineRetrier.defaultIsOfflineError
    ) {
        self.queue = queue
        self.isDeferrableError = isDeferrableError
    }

    /// Adds the `Idempotency-Key` header (the request's id) unless there is one.
    /// - Parameters:
    ///   - urlRequest: the request.
    ///   - state: its id and session.
    ///   - completion: called with the request.
    public func adapt(
        _ urlRequest: URLRequest, using state: RequestAdapterState, completion: @escaping @Sendable (Result<URLRequest, any Error>) -> Void
    ) {
        completion(.success(Self.keyed(urlRequest, id: state.requestID)))
    }

    /// Queues the request when the error defers it; see the type's notes.
    /// - Parameters:
    ///   - request: the failed request.
    ///   - session: its session.
    ///   - error: why it failed.
    ///   - completion: `.doNotRetryWithError(OfflineQueueDeferral)` once queued,
    ///     `.doNotRetryWithError(OfflineQueueError)` when the queue refused, `.doNotRetry` otherwise.
    public func retry(
        _ request: Request, for session: Session, dueTo error: any Error, completion: @escaping @Sendable (RetryResult) -> Void
    ) {
        guard isDeferrableError(error), let createdRequest = request.createdRequest else {
            completion(.doNotRetry)
            return
        }
        var created = Self.keyed(createdRequest, id: request.id)
        var body: [BodySegment] = []
        if let upload = request.uploadBody {
            let pieces: (segments: [BodySegment], contentType: String?)?
            do {
                pieces = try upload.piecesForQueue()
            } catch {
                completion(.doNotRetryWithError(error))
                return
            }
            guard let pieces else {
                completion(.doNotRetry)  // a stream: read once, nothing to keep
                return
            }
            body = pieces.segments
            if let contentType = pieces.contentType, created.headers.value(for: "Content-Type") == nil {
                created.headers.add(name: "Content-Type", value: contentType)
            }
        } else if let data = created.httpBody, !data.isEmpty {
            body = [.bytes(data)]
        }
        do {
            let record = try queue.enqueue(created, body: body)
            completion(.doNotRetryWithError(OfflineQueueDeferral(record: record, directory: queue.directory)))
        } catch {
            completion(.doNotRetryWithError(error))
        }
    }

    /// `request` with an `Idempotency-Key` header: its own if it has one, else the request id
    /// (lowercased), so every attempt and the queued copy carry the same key.
    static func keyed(_ request: URLRequest, id: UUID) -> URLRequest {
        guard request.headers.value(for: OfflineQueue.idempotencyKeyHeader) == nil else { return request }
        var keyed = request
        keyed.headers.add(name: OfflineQueue.idempotencyKeyHeader, value: "\"\(id.uuidString.lowercased())\"")
        return keyed
    }
}

/// A request was not sent but queued: the retry error of a request an `OfflineQueueDeferrer`
/// moved into its queue.
public struct OfflineQueueDeferral: Error, Sendable, CustomStringConvertible {
    /// The queued record (sequence, key, method, URL, body size).
    public let record: OfflineQueue.Record
    /// The queue's directory.
    public let directory: String

    /// `deferred to the offline queue in DIR as record N (Idempotency-Key K)`.
    public var description: String {
        "deferred to the offline queue in \(directory) as record \(record.sequence) (Idempotency-Key \(record.idempotencyKey))"
    }
}

extension TinyFireError {
    /// The deferral, when an `OfflineQueueDeferrer` queued the request instead of failing it.
    public var offlineQueueDeferral: OfflineQueueDeferral? {
        if case .requestRetryFailed(let retryError, _) = self { return retryError as? OfflineQueueDeferral }
        return nil
    }
}

extension RequestInterceptor where Self == OfflineQueueDeferrer {
    /// An `OfflineQueueDeferrer` into `queue`.
    /// - Parameters:
    ///   - queue: the queue.
    ///   - isDeferrableError: which failures defer.
    /// - Returns: the deferrer.
    public static func deferToOfflineQueue(
        _ queue: OfflineQueue, isDeferrableError: @escaping @Sendable (_ error: any Error) -> Bool = OfflineRetrier.defaultIsOfflineError
    ) -> OfflineQueueDeferrer {
        OfflineQueueDeferrer(queue: queue, isDeferrableError: isDeferrableError)
    }
}
