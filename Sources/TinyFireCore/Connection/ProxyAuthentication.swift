/// Whether a request sends its proxy's Basic credentials: one decision for the whole request,
/// whichever way the proxy asks (a 407 to CONNECT, or to a request in absolute form). Sent from
/// the first hop when the proxy says so (`Proxy.sendsCredentialsPreemptively`, curl's `-U`);
/// otherwise only in answer to the proxy's Basic challenge, once (curl answers once too, on a
/// fresh connection). A second challenge, one that is not Basic, credentials not configured, or
/// a body that cannot be sent again ends the request with `.proxyAuthenticationRequired`.
/// Sans-I/O: the transfer asks it and acts.
package struct ProxyAuthentication: Sendable, Equatable {
    /// The next head to the proxy (CONNECT, or the request) carries the credentials.
    package private(set) var sendsCredentials = false
    /// A challenge was answered: no other is.
    private var answered = false

    /// Nothing sent yet.
    package init() {}

    /// A hop starts through `proxy` (nil: none): credentials configured to go first, go.
    package mutating func hop(through proxy: Proxy?) {
        if proxy?.sendsCredentialsPreemptively ?? false { sendsCredentials = true }
    }

    /// The proxy answered 407 with `challenge` (its `Proxy-Authenticate`).
    /// - Parameters:
    ///   - credentialsConfigured: the proxy has credentials in the settings.
    ///   - bodyReplayable: the request's body can be sent again (a stream cannot).
    /// - Returns: true when the request goes again, on a fresh connection, with the credentials.
    package mutating func challenged(_ challenge: String, credentialsConfigured: Bool, bodyReplayable: Bool) -> Bool {
        guard !answered, !sendsCredentials, credentialsConfigured, bodyReplayable, challenge.lowercased().hasPrefix("basic") else {
            return false
        }
        answered = true
        sendsCredentials = true
        return true
    }
}
