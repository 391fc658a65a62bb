/// Bounds, timeouts and policies for every request of a `Session`.
///
/// All memory a request can use is bounded by these values: the read buffer per connection,
/// the header block, the in-memory body, and the number of connections per host.
public struct SessionConfiguration: Sendable {
    /// Time allowed for DNS resolution plus TCP connect. Default `defaultConnectTimeout` (30 s).
    public var connectTimeout: Duration
    /// Longest time with no byte sent or received once connected. Default
    /// `defaultIdleTimeout` (60 s, like URLSession's `timeoutIntervalForRequest`).
    public var idleTimeout: Duration
    /// Longest time for the whole request, redirects and retries included; nil for none
    /// (the default).
    public var totalTimeout: Duration?
    /// Abort when slower than this for a whole window, like curl's `--speed-limit`/
    /// `--speed-time`; nil (the default) for no limit.
    public var lowSpeedLimit: LowSpeedLimit?
    /// Most bytes per second read from the server per request, like curl's `--limit-rate`
    /// (for metered links): reading pauses while a request is ahead of the rate, so the
    /// average over a response stays at it, within one `readBufferSize`. nil (the default)
    /// for no limit. A `lowSpeedLimit` at or above it fails every long transfer.
    public var maxReceiveBytesPerSecond: Int?
    /// Bound on a response's status line plus header fields (and, separately, its trailers).
    /// Default `ResponseParser.Limits.defaultMaxHeaderBlockBytes` (64 KiB).
    public var maxHeaderBlockBytes: Int
    /// Bound on a body collected in memory (`DataRequest`), counted after decompression.
    /// Default `defaultMaxInMemoryBodyBytes` (16 MiB).
    public var maxInMemoryBodyBytes: Int
    /// Size of each connection's read buffer. Default `defaultReadBufferSize` (128 KiB).
    public var readBufferSize: Int
    /// Most connections open to one scheme/host/port at once. Default 6.
    public var maxConnectionsPerHost: Int
    /// How long an unused keep-alive connection stays open. Default 60 s.
    public var idleConnectionTimeout: Duration
    /// Most redirects followed per request; 0 disables following. Default 10.
    public var maxRedirects: Int
    /// Most retries of one request, whatever its retriers answer: past it the request fails
    /// with `.requestRetryFailed` whose `retryError` is `RetryLimitReached`. Alamofire has no
    /// such bound (a retrier that always retries loops for ever there). Default 16; at least 0.
    public var maxRetries: Int
    /// Whether an https URL may redirect to http. Default false.
    public var allowsInsecureRedirects: Bool
    /// Whether gzip and deflate responses are decoded (and `Accept-Encoding` sent by
    /// default). Default true.
    public var automaticDecompression: Bool
    /// Headers added to every request unless the request sets them. Default
    /// `HTTPHeaders.default`.
    public var headers: HTTPHeaders
    /// Request bodies of at least this many bytes are sent with `Expect: 100-continue`, so a
    /// server that refuses them (413, 401) answers before the body goes out; nil never asks.
    /// Default `defaultExpectContinueThreshold` (1 MiB, as curl).
    public var expectContinueThreshold: Int?
    /// Trust anchors, revocation lists, client identity and handshake limits for https.
    /// Default: the system CA bundle, no client certificate.
    public var tls: TLSConfiguration
    /// Which proxy each URL goes through (URLSession's `connectionProxyDictionary`). Default
    /// `.direct`: no proxy, and no environment variable is read; `.environment()` reads
    /// `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy` as curl does. A request's own
    /// `URLRequest.proxy` overrides it.
    public var proxy: ProxySettings

    /// 30 seconds.
    public static let defaultConnectTimeout: Duration = EngineSettings.standard.connectTimeout
    /// 60 seconds.
    public static let defaultIdleTimeout: Duration = EngineSettings.standard.idleTimeout
    /// 16 MiB.
    public static let defaultMaxInMemoryBodyBytes = 16 * 1024 * 1024
    /// 128 KiB.
    public static let defaultReadBufferSize = EngineSettings.standard.readBufferSize
    /// 6 connections.
    public static let defaultMaxConnectionsPerHost = EngineSettings.standard.maxConnectionsPerHost
    /// 10 redirects.
    public static let defaultMaxRedirects = EngineSettings.standard.maxRedirects
    /// 16 retries.
    public static let defaultMaxRetries = 16
    /// 1 MiB.
    public static let defaultExpectContinueThreshold = EngineSettings.standard.expectContinueThreshold ?? 1024 * 1024

    /// The default configuration.
    public static var `default`: SessionConfiguration { SessionConfiguration() }

    /// Creates a configuration; every parameter has the documented default.
    public init(
        connectTimeout: Duration = SessionConfiguration.defaultConnectTimeout,
        idleTimeout: Duration = SessionConfiguration.defaultIdleTimeout,
        totalTimeout: Duration? = nil,
        lowSpeedLimit: LowSpeedLimit? = nil,
        maxReceiveBytesPerSecond: Int? = nil,
        maxHeaderBlockBytes: Int = ResponseParser.Limits.defaultMaxHeaderBlockBytes,
        maxInMemoryBodyBytes: Int = SessionConfiguration.defaultMaxInMemoryBodyBytes,
        readBufferSize: Int = SessionConfiguration.defaultReadBufferSize,
        maxConnectionsPerHost: Int = SessionConfiguration.defaultMaxConnectionsPerHost,
        idleConnectionTimeout: Duration = .seconds(60),
        maxRedirects: Int = SessionConfiguration.defaultMaxRedirects,
        maxRetries: Int = SessionConfiguration.defaultMaxRetries,
        allowsInsecureRedirects: Bool = false,
        automaticDecompression: Bool = true,
        headers: HTTPHeaders = .default,
        expectContinueThreshold: Int? = SessionConfiguration.defaultExpectContinueThreshold,
        tls: TLSConfiguration = TLSConfiguration(),
        proxy: ProxySettings = .direct
    ) {
        self.connectTimeout = connectTimeout
        self.idleTimeout = idleTimeout
        self.totalTimeout = totalTimeout
        self.lowSpeedLimit = lowSpeedLimit
        self.maxReceiveBytesPerSecond = maxReceiveBytesPerSecond.map { max(1, $0) }
        self.maxHeaderBlockBytes = maxHeaderBlockBytes
        self.maxInMemoryBodyBytes = maxInMemoryBodyBytes
        self.readBufferSize = max(1024, readBufferSize)
        self.maxConnectionsPerHost = max(1, maxConnectionsPerHost)
        self.idleConnectionTimeout = idleConnectionTimeout
        self.maxRedirects = max(0, maxRedirects)
        self.maxRetries = max(0, maxRetries)
        self.allowsInsecureRedirects = allowsInsecureRedirects
        self.automaticDecompression = automaticDecompression
        self.headers = headers
        self.expectContinueThreshold = expectContinueThreshold
        self.tls = tls
        self.proxy = proxy
    }
}
