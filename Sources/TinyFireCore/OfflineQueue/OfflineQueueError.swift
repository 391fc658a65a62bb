#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Why the offline queue refused or failed an operation. Every case names the file or the
/// limit involved.
public enum OfflineQueueError: Error, Sendable, CustomStringConvertible {
    /// The queue directory (or one inside it) cannot be created or used.
    case directoryUnusable(path: String, message: String)
    /// Another process holds the queue's lock file.
    case locked(path: String, holder: String)
    /// The file system is full (ENOSPC, EDQUOT); the request was not queued and nothing
    /// queued before was touched.
    case diskFull(path: String)
    /// A read, write or sync failed.
    case ioFailed(path: String, operation: String, message: String)
    /// The queue is at its record or byte bound and its policy is `.rejectNew`.
    case queueFull(records: Int, bytes: Int64, maxRecords: Int, maxBytes: Int64)
    /// One record is larger than the queue's whole byte bound, or than the format allows.
    case recordTooLarge(bytes: Int64, limit: Int64)
    /// The request cannot be queued (no URL, a stream body, a header the format cannot hold).
    case invalidRequest(reason: String)
    /// The body file given to `enqueue` cannot be read.
    case bodyFileUnreadable(path: String, message: String)
    /// Delivery is running; `flush` needs it stopped.
    case deliveryRunning
    /// `close()` was called.
    case closed

    /// What failed, naming the file or the limit.
    public var description: String {
        switch self {
        case .directoryUnusable(let path, let message): return "offline queue directory \(path) is unusable: \(message)"
        case .locked(let path, let holder): return "offline queue \(path) is in use by \(holder)"
        case .diskFull(let path): return "no space left to write \(path); the request was not queued"
        case .ioFailed(let path, let operation, let message): return "cannot \(operation) \(path): \(message)"
        case .queueFull(let records, let bytes, let maxRecords, let maxBytes):
            return "offline queue is full (\(records) records, \(bytes) bytes; limits \(maxRecords) records, \(maxBytes) bytes)"
        case .recordTooLarge(let bytes, let limit): return "request of \(bytes) bytes is larger than the queue allows (\(limit) bytes)"
        case .invalidRequest(let reason): return "request cannot be queued: \(reason)"
        case .bodyFileUnreadable(let path, let message): return "cannot read body file \(path): \(message)"
        case .deliveryRunning: return "offline queue delivery is running; stop it before flushing"
        case .closed: return "offline queue is closed"
        }
    }

    /// The error for a failed system call on `path`.
    package static func io(_ code: Int32, path: String, operation: String) -> OfflineQueueError {
        if code == ENOSPC || code == EDQUOT { return .diskFull(path: path) }
        return .ioFailed(path: path, operation: operation, message: errnoMessage(code))
    }
}
