import HTTPTypes
import Synchronization

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// HTTPHeaders and HTTPHeader live in TinyFireCore (the agent's board build uses them too); the
// defaults that read the process's environment, and Basic credentials, are TinyFire's.

extension HTTPHeaders {
    /// The headers every session sends unless told otherwise, as Alamofire's
    /// `HTTPHeaders.default`: `Accept-Encoding`, `Accept-Language` (from the environment's
    /// locale) and `User-Agent` (`<executable>/<version> TinyFire/<version> (Linux; <arch>)`).
    public static var `default`: HTTPHeaders {
        [.defaultAcceptEncoding, .defaultAcceptLanguage, .defaultUserAgent]
    }

    static var machineArchitecture: String {
        #if arch(x86_64)
            return "x86_64"
        #elseif arch(arm64)
            return "aarch64"
        #elseif arch(arm)
            return "armv7"
        #else
            return "unknown"
        #endif
    }
}

extension HTTPHeader {
    /// `Authorization: Basic base64(username:password)`.
    /// - Parameters:
    ///   - username: the user.
    ///   - password: the password.
    /// - Returns: the header.
    public static func authorization(username: String, password: String) -> HTTPHeader {
        let credential = Data("\(username):\(password)".utf8).base64EncodedString()
        return authorization("Basic \(credential)")
    }

    /// `Accept-Encoding: gzip;q=1.0, deflate;q=0.9` (the codings TinyFire decodes).
    public static let defaultAcceptEncoding = acceptEncoding(["gzip", "deflate"].qualityEncoded())

    /// `Accept-Language` from the environment (`LANGUAGE`, `LC_ALL`, `LC_MESSAGES`, `LANG`), up
    /// to six languages with falling quality; `en;q=1.0` for the C/POSIX locale.
    public static var defaultAcceptLanguage: HTTPHeader {
        acceptLanguage(preferredLanguages(environment: ProcessInfo.processInfo.environment).prefix(6).qualityEncoded())
    }

    /// `User-Agent: <executable>/<version> TinyFire/<version> (Linux; <arch>)`; the version is
    /// what `setApplicationVersion(_:)` set, `unknown` before that.
    public static var defaultUserAgent: HTTPHeader {
        userAgent(userAgentString(executable: executableName, version: applicationVersion.withLock { $0 }))
    }

    /// Records the application's version for the default `User-Agent` of sessions created
    /// afterwards.
    /// - Parameter version: e.g. `1.4.2`.
    public static func setApplicationVersion(_ version: String) {
        applicationVersion.withLock { $0 = version }
    }

    private static let applicationVersion = Mutex<String>("unknown")

    static var executableName: String {
        let path = CommandLine.arguments.first ?? "unknown"
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return name.isEmpty ? "unknown" : String(name.map { $0 == " " ? "-" : $0 })
    }

    static func userAgentString(executable: String, version: String) -> String {
        "\(executable)/\(version) TinyFire/\(HTTPHeaders.tinyFireVersion) (Linux; \(HTTPHeaders.machineArchitecture))"
    }

    /// Language tags from POSIX locale variables: `de_DE.UTF-8` → `de-DE`.
    static func preferredLanguages(environment: [String: String]) -> [String] {
        var candidates: [String] = []
        if let language = environment["LANGUAGE"], !language.isEmpty {
            candidates = language.split(separator: ":").map(String.init)
        } else if let value = ["LC_ALL", "LC_MESSAGES", "LANG"].lazy.compactMap({ environment[$0] }).first(where: { !$0.isEmpty }) {
            candidates = [value]
        }
        var tags: [String] = []
        for candidate in candidates {
            var tag = Substring(candidate)
            if let dot = tag.firstIndex(where: { $0 == "." || $0 == "@" }) { tag = tag[..<dot] }
            let text = String(tag.map { $0 == "_" ? "-" : $0 })
            guard !text.isEmpty, text != "C", text != "POSIX", !tags.contains(text) else { continue }
            tags.append(text)
        }
        return tags.isEmpty ? ["en"] : tags
    }
}

extension Collection<String> {
    /// `a;q=1.0, b;q=0.9, …` (quality falls by 0.1, as Alamofire writes its defaults).
    func qualityEncoded() -> String {
        enumerated().map { index, value in
            let quality = Swift.max(10 - index, 1)
            let text = quality == 10 ? "1.0" : "0.\(quality)"
            return "\(value);q=\(text)"
        }.joined(separator: ", ")
    }
}

extension HTTPResponse {
    /// The status code, as `HTTPURLResponse.statusCode` (for ported code).
    public var statusCode: Int { status.code }

    /// The header fields as `HTTPHeaders`, as Alamofire's `HTTPURLResponse.headers`.
    public var headers: HTTPHeaders { HTTPHeaders(headerFields) }
}

extension HTTPRequest {
    /// The header fields as `HTTPHeaders`.
    public var headers: HTTPHeaders { HTTPHeaders(headerFields) }
}
