/// Timings and counts for one request, redirects included.
public struct TransferMetrics: Sendable {
    /// URLs redirected to, in order.
    public var redirects: [String] = []
    /// Whether the final hop ran on a kept-alive connection.
    public var reusedConnection = false
    /// Whether a stale kept-alive connection forced one automatic retry.
    public var retriedOnStaleConnection = false
    /// The peer address of the final hop (`127.0.0.1:8080`, `[::1]:443`): the proxy's when it
    /// went through one (`ProxySettings.proxy(forScheme:host:)` says which).
    public var remoteAddress: String?
    /// DNS time of the final hop, when it resolved.
    public var nameLookup: Duration?
    /// TCP connect time of the final hop, when it connected.
    public var connect: Duration?
    /// TLS handshake time of the final hop; nil for plain HTTP and reused connections.
    public var tlsHandshake: Duration?
    /// What the final hop's TLS handshake negotiated (nil for plain HTTP).
    public var tls: TLSDetails?
    /// From the start of the final hop to the last request byte written.
    public var requestSent: Duration?
    /// From the start of the final hop to the first response byte.
    public var timeToFirstByte: Duration?
    /// From the start of the request to its end.
    public var total: Duration = .zero
    /// Request bytes written on the final hop (head and body).
    public var requestBytesSent: UInt64 = 0
    /// Response bytes read on the final hop (head and body, as on the wire).
    public var responseBytesReceived: UInt64 = 0
    /// Response body bytes after de-chunking, before decompression.
    public var responseBodyBytes: UInt64 = 0
    /// Response body bytes after decompression.
    public var decodedBodyBytes: UInt64 = 0
}
