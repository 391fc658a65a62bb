#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// Proxies: one proxy server (`Proxy`), which proxy a URL goes through (`ProxySettings`, the
// typed counterpart of URLSession's `connectionProxyDictionary`), and the hosts that go direct
// (`NoProxyList`). Part of the core: no Foundation, typed throws. TinyFire's public
// `Proxy(url:)` and `ProxySettings.environment()` (TinyFire/Session/ProxyParsing.swift) throw
// `TinyFireError.invalidProxy` with the reason these give.

/// A proxy URL or a proxy variable that cannot be used, with the reason (the URL with its
/// password masked, and the problem).
package struct ProxyURLError: Error, Sendable, CustomStringConvertible {
    package let reason: String
    package var description: String { reason }

    package init(reason: String) { self.reason = reason }
}

/// A user name and password for a proxy's Basic authentication. Printing it masks the password.
public struct ProxyCredentials: Sendable, Equatable, CustomStringConvertible {
    /// The user name (decoded: `%40` in a URL is `@` here).
    public var user: String
    /// The password (decoded).
    public var password: String

    /// Creates credentials.
    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// `user:***`: never the password.
    public var description: String { "\(user):***" }

    /// The `Proxy-Authorization` value: `Basic base64(user:password)`.
    package var basicAuthorization: String {
        "Basic " + Base64.encode(Array(user.utf8) + [UInt8(ascii: ":")] + Array(password.utf8))
    }
}

/// One proxy server: how to reach it and how to speak to it.
///
/// - `http://host:port`: plain HTTP to the proxy. An `http://` URL is sent to it in absolute
///   form (`GET http://origin/path HTTP/1.1`); an `https://` URL goes through a CONNECT tunnel,
///   and the origin's TLS runs inside it.
/// - `https://host:port`: TLS to the proxy first (checked against `tls`), then the same.
///
/// The origin's certificate is always checked against the session's trust (CA files, pins,
/// revocation), through the tunnel: a proxy that terminates TLS itself is refused unless the
/// session trusts its CA, and pins refuse it even then.
public struct Proxy: Sendable, Equatable, CustomStringConvertible {
    /// How the client talks to the proxy itself.
    public enum Scheme: String, Sendable, Equatable {
        /// Plain HTTP to the proxy (curl's default). Default port 1080, as curl's.
        case http
        /// TLS to the proxy (curl's `https://` proxy). Default port 443.
        case https
    }

    /// The fields, behind one reference: a request carries its proxy settings in every copy of
    /// its `URLRequest` and spec, so the value stays one pointer wide (copy on write).
    private struct Fields: Sendable, Equatable {
        var scheme: Scheme
        var host: String
        var port: Int
        var credentials: ProxyCredentials?
        var tunnelsHTTP: Bool
        var sendsCredentialsPreemptively: Bool
        var tls: TLSConfiguration
    }

    private var storage: ImmutableBox<Fields>

    private var fields: Fields {
        get { storage.value }
        set { storage = ImmutableBox(newValue) }
    }

    /// How the client talks to the proxy.
    public var scheme: Scheme {
        get { fields.scheme }
        set { fields.scheme = newValue }
    }
    /// The proxy's host name or IP address (an IPv6 address without brackets).
    public var host: String {
        get { fields.host }
        set { fields.host = newValue }
    }
    /// The proxy's port.
    public var port: Int {
        get { fields.port }
        set { fields.port = newValue }
    }
    /// Basic credentials for the proxy, sent in `Proxy-Authorization` to the proxy only: in the
    /// CONNECT request of a tunnel, or in the head of a request sent in absolute form. Never to
    /// an origin, and masked wherever the proxy is printed.
    public var credentials: ProxyCredentials? {
        get { fields.credentials }
        set { fields.credentials = newValue }
    }
    /// Whether `http://` URLs also go through a CONNECT tunnel instead of being sent in absolute
    /// form (curl's `--proxytunnel`). Default false.
    public var tunnelsHTTP: Bool {
        get { fields.tunnelsHTTP }
        set { fields.tunnelsHTTP = newValue }
    }
    /// Whether the credentials go with the first request (curl's behaviour with `-U`, one round
    /// trip less) or only in answer to a 407 with a Basic challenge (answered once). Default true.
    public var sendsCredentialsPreemptively: Bool {
        get { fields.sendsCredentialsPreemptively }
        set { fields.sendsCredentialsPreemptively = newValue }
    }
    /// The trust for an `https` proxy's own certificate; the origin's is the session's. Only
    /// its CA files, CA directories, CRLs and handshake timeout are used. Default: the system
    /// CA bundle.
    public var tls: TLSConfiguration {
        get { fields.tls }
        set { fields.tls = newValue }
    }

    /// Equal when every field is.
    public static func == (lhs: Proxy, rhs: Proxy) -> Bool {
        lhs.storage === rhs.storage || lhs.fields == rhs.fields
    }

    /// The default port of a proxy URL without one: curl's 1080 for http, 443 for https.
    public static func defaultPort(for scheme: Scheme) -> Int { scheme == .https ? 443 : 1080 }

    /// Creates a proxy from its parts.
    /// - Parameters:
    ///   - scheme: how to talk to the proxy; default `.http`.
    ///   - host: host name or IP address (IPv6 without brackets).
    ///   - port: default `defaultPort(for: scheme)`.
    ///   - credentials: Basic credentials; default none.
    ///   - tunnelsHTTP: CONNECT for `http://` URLs too; default false.
    ///   - tls: trust for an https proxy's certificate; default the system CA bundle.
    public init(
        scheme: Scheme = .http, host: String, port: Int? = nil, credentials: ProxyCredentials? = nil,
        tunnelsHTTP: Bool = false, sendsCredentialsPreemptively: Bool = true, tls: TLSConfiguration = TLSConfiguration()
    ) {
        storage = ImmutableBox(
            Fields(
                scheme: scheme, host: host, port: port ?? Proxy.defaultPort(for: scheme), credentials: credentials,
                tunnelsHTTP: tunnelsHTTP, sendsCredentialsPreemptively: sendsCredentialsPreemptively, tls: tls))
    }

    /// Parses a proxy URL as curl takes it: `[scheme://][user[:password]@]host[:port][/]`.
    /// A URL without a scheme is `http://`; user and password are percent-decoded.
    /// - Throws: `ProxyURLError` naming the problem: an unsupported scheme (SOCKS is not
    ///   supported), no host, a bad port, a path, or characters a host cannot hold.
    package init(parsing text: String) throws(ProxyURLError) {
        var rest = Substring(text)
        var scheme = Scheme.http
        if let range = rest.firstRange(ofASCII: "://") {
            let name = rest[..<range.lowerBound].lowercased()
            switch name {
            case "http": scheme = .http
            case "https": scheme = .https
            case "socks4", "socks4a", "socks5", "socks5h":
                throw ProxyURLError(reason: "\(Proxy.masked(text)): SOCKS proxies are not supported (use an HTTP proxy)")
            default:
                throw ProxyURLError(reason: "\(Proxy.masked(text)): unsupported proxy scheme \(quoted(name))")
            }
            rest = rest[range.upperBound...]
        }
        // The authority ends at the path; a path other than "/" is a mistake worth naming.
        if let slash = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            guard rest[slash...] == "/" else {
                // `user:pa/ss@host`: the password ends the authority where it holds the
                // character; it must be percent-encoded.
                let hint = rest[slash...].contains("@") ? " (a /, ? or # in the user or password is written %2F, %3F, %23)" : ""
                throw ProxyURLError(reason: "\(Proxy.masked(text)): a proxy URL has no path, query or fragment\(hint)")
            }
            rest = rest[..<slash]
        }
        var credentials: ProxyCredentials?
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let user: Substring
            let password: Substring
            if let colon = userInfo.firstIndex(of: ":") {
                user = userInfo[..<colon]
                password = userInfo[userInfo.index(after: colon)...]
            } else {
                user = userInfo
                password = ""
            }
            guard let decodedUser = percentDecoded(user), let decodedPassword = percentDecoded(password) else {
                throw ProxyURLError(reason: "\(Proxy.masked(text)): bad percent-encoding in the user or password")
            }
            credentials = ProxyCredentials(user: decodedUser, password: decodedPassword)
        }
        let (host, port) = try Proxy.splitHostPort(rest, in: text)
        self.init(scheme: scheme, host: host, port: port, credentials: credentials)
    }

    /// `scheme://host:port` without credentials, for errors and logs.
    public var displayURL: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(scheme.rawValue)://\(shownHost):\(port)"
    }

    /// The proxy as a URL with the password masked: `http://user:***@host:port`.
    public var description: String {
        guard let credentials else { return displayURL }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(scheme.rawValue)://\(credentials.user):***@\(shownHost):\(port)"
    }

    /// A proxy URL as text with any password replaced by `***` (for errors about a URL that
    /// did not parse). Everything between the scheme's `://` and the last `@` is taken as the
    /// user information, wherever a `/`, `?` or `#` stands (a password holding one does not
    /// parse as a proxy URL, and is still never shown): only the user name before its first
    /// `:` is kept.
    public static func masked(_ url: String) -> String {
        let bytes = Array(url.utf8)
        guard let userInfo = userInfoBounds(in: bytes) else { return url }
        let colon = bytes[userInfo.start..<userInfo.at].firstIndex(of: UInt8(ascii: ":")) ?? userInfo.at
        return String(decoding: bytes[..<colon] + Array(":***".utf8) + bytes[userInfo.at...], as: UTF8.self)
    }

    /// Where the password of a proxy URL stands in its bytes, by the rule of `masked`: after
    /// the first `:` of the user information, up to the last `@`. User information without a
    /// `:` holds no password (nil), as curl reads `user@host`; an empty password is an empty
    /// range.
    /// - Parameter url: the URL's UTF-8 bytes, as given (not decoded).
    /// - Returns: the byte range to hide, or nil when there is none.
    package static func secretRange(in url: [UInt8]) -> Range<Int>? {
        guard let userInfo = userInfoBounds(in: url), let colon = url[userInfo.start..<userInfo.at].firstIndex(of: UInt8(ascii: ":"))
        else { return nil }
        return (colon + 1)..<userInfo.at
    }

    /// The user information of a proxy URL: from after the first `://` (or the start) to the
    /// last `@`, wherever a `/`, `?` or `#` stands; nil without an `@`.
    private static func userInfoBounds(in url: [UInt8]) -> (start: Int, at: Int)? {
        var start = 0
        for index in 0..<max(0, url.count - 2)
        where url[index] == UInt8(ascii: ":") && url[index + 1] == UInt8(ascii: "/") && url[index + 2] == UInt8(ascii: "/") {
            start = index + 3
            break
        }
        guard let at = url[start...].lastIndex(of: UInt8(ascii: "@")) else { return nil }
        return (start, at)
    }

    private static func splitHostPort(_ authority: Substring, in text: String) throws(ProxyURLError) -> (String, Int?) {
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else {
                throw ProxyURLError(reason: "\(masked(text)): an IPv6 address without its closing bracket")
            }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw ProxyURLError(reason: "\(masked(text)): junk after the IPv6 address") }
                portText = after.dropFirst()
            }
            guard IPAddressBytes.parse(String(host))?.count == 16 else {
                throw ProxyURLError(reason: "\(masked(text)): \(quoted(String(host))) is not an IPv6 address")
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw ProxyURLError(reason: "\(masked(text)): no host") }
        for byte in host.utf8 where byte <= 0x20 || byte >= 0x7F || byte == UInt8(ascii: "%") || byte == UInt8(ascii: "@") {
            throw ProxyURLError(reason: "\(masked(text)): the host holds a character a host name cannot")
        }
        var port: Int?
        if let portText {
            guard let value = Int(portText), portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), (1...65535).contains(value)
            else {
                throw ProxyURLError(reason: "\(masked(text)): port \(quoted(String(portText))) is not a number from 1 to 65535")
            }
            port = value
        }
        return (String(host), port)
    }
}

/// The hosts that bypass the proxy, by curl's `no_proxy` rules:
/// - `*` alone: every host;
/// - a host name: that host and every name under it (`example.com` matches `example.com` and
///   `api.example.com`, not `badexample.com`); a leading dot changes nothing (`.example.com`
///   is the same entry);
/// - an IPv4 or IPv6 address (with or without brackets), or a CIDR range (`10.0.0.0/8`,
///   `fd00::/8`): a URL whose host is such an address. Names are not resolved for this.
/// Entries are separated by commas or spaces; matching ignores case and a trailing dot.
public struct NoProxyList: Sendable, Equatable, CustomStringConvertible {
    package enum Entry: Sendable, Equatable {
        case all
        case name(String)
        case network(address: [UInt8], prefix: Int)
    }

    package let entries: [Entry]
    /// Entries that are neither `*`, a host name nor an address or range (a bad CIDR prefix,
    /// a port): curl ignores them; `config check` reports them.
    public let invalidEntries: [String]
    /// The list as given.
    public let description: String

    /// No host bypasses the proxy.
    public static let none = NoProxyList(parsing: "")

    /// Parses a `no_proxy` value (`"localhost,.corp.example,10.0.0.0/8,::1"`).
    public init(parsing text: String) {
        var entries: [Entry] = []
        var invalid: [String] = []
        for raw in text.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\t" }) {
            let token = String(raw)
            if let entry = NoProxyList.entry(token) {
                entries.append(entry)
            } else {
                invalid.append(token)
            }
        }
        self.entries = entries
        self.invalidEntries = invalid
        self.description = text
    }

    /// Parses a list of entries (a config file's array).
    public init(_ list: [String]) {
        self.init(parsing: list.joined(separator: ","))
    }

    /// Whether a request to `host` goes direct.
    public func matches(host rawHost: String) -> Bool {
        guard !entries.isEmpty else { return false }
        var host = rawHost.lowercased()
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        let address = IPAddressBytes.parse(host)
        for entry in entries {
            switch entry {
            case .all:
                return true
            case .name(let name):
                guard address == nil else { continue }
                if host == name { return true }
                if host.hasSuffix(name), host.utf8.count > name.utf8.count,
                    host.utf8[host.utf8.index(host.utf8.endIndex, offsetBy: -name.utf8.count - 1)] == UInt8(ascii: ".")
                {
                    return true
                }
            case .network(let network, let prefix):
                guard let address, address.count == network.count else { continue }
                if NoProxyList.samePrefix(address, network, bits: prefix) { return true }
            }
        }
        return false
    }

    /// Whether this list sends every host direct (`*`).
    public var matchesEverything: Bool { entries.contains(.all) }

    private static func entry(_ token: String) -> Entry? {
        if token == "*" { return .all }
        var text = Substring(token.lowercased())
        var prefixText: Substring?
        if let slash = text.firstIndex(of: "/") {
            prefixText = text[text.index(after: slash)...]
            text = text[..<slash]
        }
        if text.hasPrefix("[") && text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if let address = IPAddressBytes.parse(String(text)) {
            let bits = address.count * 8
            guard let prefixText else { return .network(address: address, prefix: bits) }
            guard let prefix = Int(prefixText), (0...bits).contains(prefix) else { return nil }
            return .network(address: address, prefix: prefix)
        }
        guard prefixText == nil else { return nil }
        if text.hasPrefix(".") { text = text.dropFirst() }
        if text.hasSuffix(".") { text = text.dropLast() }
        guard !text.isEmpty, text.utf8.allSatisfy({ NoProxyList.isNameByte($0) }) else { return nil }
        return .name(String(text))
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"): return true
        default: return byte >= 0x80
        }
    }

    private static func samePrefix(_ a: [UInt8], _ b: [UInt8], bits: Int) -> Bool {
        var remaining = bits
        var index = 0
        while remaining >= 8 {
            if a[index] != b[index] { return false }
            index += 1
            remaining -= 8
        }
        guard remaining > 0 else { return true }
        let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - remaining))
        return a[index] & mask == b[index] & mask
    }
}

/// Which proxy each URL goes through: the typed form of URLSession's
/// `connectionProxyDictionary` (`HTTPProxy`/`HTTPPort` → `http`, `HTTPSProxy`/`HTTPSPort` →
/// `https`, `ExceptionsList` → `noProxy`).
///
/// The default is `.direct`: a session reads no environment variable unless asked with
/// `.environment()`. fire-agent's `request` and the agent ask for it.
public struct ProxySettings: Sendable, Equatable, CustomStringConvertible {
    /// The fields, behind one reference (copy on write): every copy of a `URLRequest` and a
    /// `SessionConfiguration` carries these settings, one pointer wide.
    private struct Fields: Sendable, Equatable {
        var http: Proxy?
        var https: Proxy?
        var noProxy: NoProxyList
    }

    private var storage: ImmutableBox<Fields>

    private var fields: Fields {
        get { storage.value }
        set { storage = ImmutableBox(newValue) }
    }

    /// The proxy for `http://` URLs; nil: direct.
    public var http: Proxy? {
        get { fields.http }
        set { fields.http = newValue }
    }
    /// The proxy for `https://` URLs; nil: direct.
    public var https: Proxy? {
        get { fields.https }
        set { fields.https = newValue }
    }
    /// Hosts that go direct whatever the scheme.
    public var noProxy: NoProxyList {
        get { fields.noProxy }
        set { fields.noProxy = newValue }
    }

    /// Whether no proxy is set at all (the common case, answered without looking further).
    public var isDirect: Bool { storage.value.http == nil && storage.value.https == nil }

    /// Equal when every field is.
    public static func == (lhs: ProxySettings, rhs: ProxySettings) -> Bool {
        lhs.storage === rhs.storage || lhs.fields == rhs.fields
    }

    /// No proxy.
    public static let direct = ProxySettings()

    /// Creates settings.
    /// - Parameters:
    ///   - http: proxy for `http://` URLs.
    ///   - https: proxy for `https://` URLs.
    ///   - noProxy: hosts that go direct; default none.
    public init(http: Proxy? = nil, https: Proxy? = nil, noProxy: NoProxyList = .none) {
        storage = ImmutableBox(Fields(http: http, https: https, noProxy: noProxy))
    }

    /// One proxy for every URL (curl's `-x`).
    public init(all proxy: Proxy, noProxy: NoProxyList = .none) {
        self.init(http: proxy, https: proxy, noProxy: noProxy)
    }

    /// The proxy a request to `scheme://host` goes through, nil for direct.
    public func proxy(forScheme scheme: String, host: String) -> Proxy? {
        guard !isDirect else { return nil }
        let proxy: Proxy?
        switch scheme.lowercased() {
        case "http": proxy = http
        case "https": proxy = https
        default: proxy = nil
        }
        guard let proxy, !noProxy.matches(host: host) else { return nil }
        return proxy
    }

    /// The host a request to `scheme://host` connects to: its proxy's, or `host` itself. The
    /// route that matters for reachability (`NetworkReachabilityManager(host:)`) and for the
    /// offline queue's wait for the network.
    public func routeHost(forScheme scheme: String, host: String) -> String {
        proxy(forScheme: scheme, host: host)?.host ?? host
    }

    /// Settings from the environment, by curl's rules:
    /// - `http_proxy` for `http://` URLs (lowercase only: `HTTP_PROXY` is ignored, since a CGI
    ///   program gets a client's `Proxy:` header under that name);
    /// - `https_proxy` or `HTTPS_PROXY` for `https://` URLs;
    /// - `all_proxy` or `ALL_PROXY` for either when its own variable is unset;
    /// - `no_proxy` or `NO_PROXY`: hosts that go direct (see `NoProxyList`).
    /// Lowercase wins over uppercase; an empty value is unset.
    /// - Parameter lookup: reads a variable; default `getenv`.
    /// - Throws: `ProxyURLError` naming the variable whose proxy URL is malformed.
    package static func parseEnvironment(_ lookup: (String) -> String?) throws(ProxyURLError) -> ProxySettings {
        func value(_ names: String...) -> (name: String, value: String)? {
            for name in names {
                if let text = lookup(name), !text.isEmpty { return (name, text) }
            }
            return nil
        }
        func proxy(_ found: (name: String, value: String)?) throws(ProxyURLError) -> Proxy? {
            guard let found else { return nil }
            do throws(ProxyURLError) {
                return try Proxy(parsing: found.value)
            } catch {
                throw ProxyURLError(reason: "\(found.name): \(error.reason)")
            }
        }
        let all = value("all_proxy", "ALL_PROXY")
        let http = try proxy(value("http_proxy") ?? all)
        let https = try proxy(value("https_proxy", "HTTPS_PROXY") ?? all)
        let noProxy = value("no_proxy", "NO_PROXY").map { NoProxyList(parsing: $0.value) } ?? .none
        return ProxySettings(http: http, https: https, noProxy: noProxy)
    }

    /// `getenv`.
    public static func processEnvironment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }

    /// `http=…, https=…, noProxy=…`, passwords masked.
    public var description: String {
        "http=\(http?.description ?? "direct"), https=\(https?.description ?? "direct"), noProxy=\(noProxy.description)"
    }
}

/// Base64 (RFC 4648, with padding) without Foundation.
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(alphabet[Int(value >> 18 & 63)])
            out.append(alphabet[Int(value >> 12 & 63)])
            out.append(alphabet[Int(value >> 6 & 63)])
            out.append(alphabet[Int(value & 63)])
            index += 3
        }
        let left = bytes.count - index
        if left > 0 {
            let value = UInt32(bytes[index]) << 16 | (left == 2 ? UInt32(bytes[index + 1]) << 8 : 0)
            out.append(alphabet[Int(value >> 18 & 63)])
            out.append(alphabet[Int(value >> 12 & 63)])
            out.append(left == 2 ? alphabet[Int(value >> 6 & 63)] : UInt8(ascii: "="))
            out.append(UInt8(ascii: "="))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of base64 text: the standard alphabet, a length that is a multiple of four, and
    /// `=` padding only at the end (one or two). Bits past the last whole byte are ignored, as
    /// Foundation's `Data(base64Encoded:)` ignores them.
    /// - Returns: nil for anything else (whitespace, the URL-safe alphabet, missing padding).
    package static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 4 * 3)
        var index = 0
        while index < utf8.count {
            let last = index + 4 == utf8.count
            var value: UInt32 = 0
            var padding = 0
            for offset in 0..<4 {
                let byte = utf8[index + offset]
                if byte == UInt8(ascii: "=") {
                    // Only the last group pads, only its last one or two places, and a place
                    // after a `=` must be `=` too.
                    guard last, offset >= 2 else { return nil }
                    padding += 1
                    value <<= 6
                    continue
                }
                guard padding == 0, let digit = sextet(byte) else { return nil }
                value = value << 6 | UInt32(digit)
            }
            out.append(UInt8(value >> 16 & 0xFF))
            if padding < 2 { out.append(UInt8(value >> 8 & 0xFF)) }
            if padding < 1 { out.append(UInt8(value & 0xFF)) }
            index += 4
        }
        return out
    }

    private static func sextet(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): return 62
        case UInt8(ascii: "/"): return 63
        default: return nil
        }
    }
}

/// A value behind one immutable reference: a struct that holds one stays a pointer wide, and a
/// change makes a new box (copy on write without uniqueness checks).
package final class ImmutableBox<Value: Sendable>: Sendable {
    package let value: Value
    package init(_ value: Value) { self.value = value }
}
