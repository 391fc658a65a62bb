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

/// The request object behind a transfer: it chooses the body sink and receives the outcome.
/// Called as loop work: on the loop thread, or while a transfer starts, on the thread that
/// started it (`EventLoop.runIfWaiting`). `transferDidFinish` always comes from the loop thread.
protocol TransferOwner: AnyObject, Sendable {
    /// Whether `cancel()` was called before the transfer started.
    var isCancelled: Bool { get }
    /// Whether the transfer started suspended.
    var isSuspended: Bool { get }
    /// Who decides redirects; nil follows them.
    var transferRedirectHandler: (any RedirectHandler)? { get }
    /// Whether anyone listens to progress.
    var transferWantsProgress: Bool { get }
    /// The sink for the final response's body.
    func transferMakeSink(for response: HTTPResponse, expectedLength: UInt64?) throws(SinkError) -> ResponseBodySink
    /// The final response head arrived (redirects are not reported). True holds the body
    /// back (reading pauses at once) until the owner lets it flow.
    func transferDidReceiveResponse(_ response: HTTPResponse, request: SentRequestHead) -> Bool
    /// A redirect is about to be followed.
    func transferWillRedirect(to redirect: URLRequest, for response: HTTPResponse)
    /// Bytes moved: request body sent of total, response body received of expected.
    func transferProgress(upload: (UInt64, UInt64?)?, download: (UInt64, UInt64?)?, final: Bool)
    /// The transfer ended; called exactly once.
    func transferDidFinish(
        _ result: Result<SinkOutput, TinyFireError>, request: SentRequestHead?, response: HTTPResponse?,
        metrics: TransferMetrics)
}
