import HTTPTypes

/// HTTP Basic challenges, answered once per request as URLSession does for Alamofire's
/// `authenticate(username:password:)`.
extension Request {
    /// Answers an HTTP Basic challenge (a 401 with `WWW-Authenticate: Basic`) with these
    /// credentials, once, as URLSession does for Alamofire's `authenticate(username:password:)`.
    /// The first attempt goes without them; send `HTTPHeader.authorization(username:password:)`
    /// yourself to skip the round trip. Digest, NTLM and Kerberos are not supported.
    /// - Parameters:
    ///   - username: the user.
    ///   - password: the password.
    /// - Returns: the request.
    @discardableResult
    public func authenticate(username: String, password: String) -> Self {
        protected.withLock { $0.credential = (username, password) }
        return self
    }

    /// `created` with the credentials once a challenge was answered.
    func withAnsweredChallenge(_ created: URLRequest) -> URLRequest {
        guard let (user, password) = protected.withLock({ $0.answeredChallenge ? $0.credential : nil }) else { return created }
        var request = created
        request.headers.update(.authorization(username: user, password: password))
        return request
    }
}

extension Request.MutableState {
    /// Whether the response is a Basic challenge to answer now (credentials set, not answered
    /// yet, not cancelled); marks it answered.
    mutating func takeBasicChallenge() -> Bool {
        guard credential != nil, !answeredChallenge, let response, response.status.code == 401, state != .cancelled,
            response.headerFields[values: .wwwAuthenticate].contains(where: { $0.lowercased().hasPrefix("basic") })
        else { return false }
        answeredChallenge = true
        return true
    }
}
