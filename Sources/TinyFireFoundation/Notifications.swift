// Alamofire's request notifications, posted to `NotificationCenter` (full Foundation, hence this
// module) by the `AlamofireNotifications` event monitor. Alamofire adds that monitor to every
// session; with TinyFire give it to the session: `Session(eventMonitors: [AlamofireNotifications()])`.

import Dispatch
import Foundation
import TinyFire

extension Request {
    /// Posted when a request is resumed; the request is the notification's `request`.
    public static let didResumeNotification = Notification.Name(rawValue: "org.alamofire.notification.name.request.didResume")
    /// Posted when a request is suspended.
    public static let didSuspendNotification = Notification.Name(rawValue: "org.alamofire.notification.name.request.didSuspend")
    /// Posted when a request is cancelled.
    public static let didCancelNotification = Notification.Name(rawValue: "org.alamofire.notification.name.request.didCancel")
    /// Posted when a request finishes.
    public static let didFinishNotification = Notification.Name(rawValue: "org.alamofire.notification.name.request.didFinish")
    /// Posted when an attempt's transfer starts (Alamofire: its `URLSessionTask` is resumed).
    public static let didResumeTaskNotification = Notification.Name(rawValue: "org.alamofire.notification.name.request.didResumeTask")
    /// Posted when an attempt's transfer ends, with or without an error.
    public static let didCompleteTaskNotification = Notification.Name(
        rawValue: "org.alamofire.notification.name.request.didCompleteTask")
}

extension Notification {
    /// The request a TinyFire notification is about.
    public var request: Request? { userInfo?[Self.requestKey] as? Request }

    /// The key under which the request is in `userInfo`, Alamofire's.
    static let requestKey = "org.alamofire.notification.key.request"
}

/// Posts Alamofire's request notifications to `NotificationCenter.default` (lifecycle:
/// resume, suspend, cancel, finish; each attempt's transfer start and end).
public final class AlamofireNotifications: EventMonitor {
    /// Where the notifications are posted from.
    public let queue = DispatchQueue(label: "org.tinyfire.notifications")

    /// Creates the monitor.
    public init() {}

    private func post(_ name: Notification.Name, _ request: Request) {
        NotificationCenter.default.post(name: name, object: nil, userInfo: [Notification.requestKey: request])
    }

    /// Posts `Request.didResumeNotification`.
    /// - Parameter request: the request.
    public func requestDidResume(_ request: Request) { post(Request.didResumeNotification, request) }
    /// Posts `Request.didSuspendNotification`.
    /// - Parameter request: the request.
    public func requestDidSuspend(_ request: Request) { post(Request.didSuspendNotification, request) }
    /// Posts `Request.didCancelNotification`.
    /// - Parameter request: the request.
    public func requestDidCancel(_ request: Request) { post(Request.didCancelNotification, request) }
    /// Posts `Request.didFinishNotification`.
    /// - Parameter request: the request.
    public func requestDidFinish(_ request: Request) { post(Request.didFinishNotification, request) }
    /// Posts `Request.didResumeTaskNotification`.
    /// - Parameters:
    ///   - request: the request.
    ///   - urlRequest: the request the transfer sends.
    public func request(_ request: Request, didStartTransferFor urlRequest: URLRequest) {
        post(Request.didResumeTaskNotification, request)
    }
    /// Posts `Request.didCompleteTaskNotification`.
    /// - Parameters:
    ///   - request: the request.
    ///   - error: the transfer's error, if any.
    public func request(_ request: Request, didCompleteTransferWithError error: TinyFireError?) {
        post(Request.didCompleteTaskNotification, request)
    }
}
