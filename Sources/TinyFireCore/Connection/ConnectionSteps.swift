// The steps a connection runs on its stream before HTTP exchanges can (TLS handshakes, a
// CONNECT tunnel through a proxy), as sans-I/O state machines over a `ByteStream`: the caller
// (TinyFire's HTTPConnection) waits for readiness and calls `advance()` again.

/// How far a connection step (a TLS handshake, a CONNECT) got.
package enum ConnectionStepProgress {
    /// Finished: the next step, or the exchange, can run.
    case done
    /// Waiting for the socket to be readable.
    case wantRead
    /// Waiting for the socket to be writable.
    case wantWrite
    /// Failed, for this reason.
    case failed(TransferError.Reason)
}

/// Something a connection runs on its stream before HTTP exchanges can: a TLS handshake, a
/// CONNECT through a proxy. The connection calls `advance()` when the socket is ready, until
/// it is done or failed.
package protocol ConnectionStep: AnyObject {
    /// Moves the step on as far as the stream allows.
    func advance() -> ConnectionStepProgress
}

/// A TLS handshake on a stream.
package final class TLSHandshakeStep: ConnectionStep {
    package let tls: TLSStream

    package init(_ tls: TLSStream) {
        self.tls = tls
    }

    package func advance() -> ConnectionStepProgress {
        switch tls.handshake() {
        case .done: return .done
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .failed(let code):
            // mbedTLS 3.x answers 0xFFFFFFFF ("not verified yet") when the handshake died
            // before any certificate arrived (a server that does not speak TLS): that is a TLS
            // failure, not an untrusted certificate.
            let flags = tls.verificationFlags
            if flags != 0 && flags != UInt32.max {
                return .failed(.certificateVerificationFailed(reasons: tlsVerificationReasons(flags)))
            }
            return .failed(.tlsFailed(code: code, message: tlsErrorMessage(code)))
        }
    }
}

/// Opens a tunnel through an HTTP proxy: sends `CONNECT host:port HTTP/1.1` on the stream and
/// reads the proxy's answer. A 2xx answer makes the stream a byte pipe to the origin; anything
/// else ends the step with a reason that names the status. Nothing is read past the answer's
/// head: bytes after a 2xx head, before the client has spoken through the tunnel, are refused
/// (no origin speaks first in TLS or HTTP), whether they came in the answer's read or are
/// waiting in a later one when the step ends.
///
/// Memory: the CONNECT request (a few hundred bytes), a 4 KiB read buffer, and the parser's head
/// buffer (bounded by `maxHeadBytes`). Loop-confined.
package final class ProxyTunnelStep: ConnectionStep {
    /// The bytes of a read the answer's head did not use.
    package static let readBufferSize = 4096

    private let stream: any ByteStream
    private let request: [UInt8]
    private var written = 0
    private var parser: ResponseParser
    private var buffer = [UInt8](repeating: 0, count: ProxyTunnelStep.readBufferSize)
    /// The proxy's answer, once its head arrived.
    package private(set) var answer: ResponseHead?
    /// The answer's first bytes (after any empty lines), until they show whether it is HTTP.
    private var start: [UInt8] = []
    private static let httpPrefix = Array("HTTP/".utf8)

    /// - Parameters:
    ///   - stream: the connection's stream to the proxy (plain, or TLS to an https proxy).
    ///   - authority: `host:port` of the origin (`[v6]:port` for IPv6).
    ///   - authorization: the `Proxy-Authorization` value, when credentials go with it.
    ///   - userAgent: the session's `User-Agent`, sent as curl does.
    ///   - maxHeadBytes: the largest answer head accepted.
    package init(stream: any ByteStream, authority: String, authorization: String?, userAgent: String?, maxHeadBytes: Int) {
        self.stream = stream
        var text = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        if let userAgent { text += "User-Agent: \(userAgent)\r\n" }
        if let authorization { text += "Proxy-Authorization: \(authorization)\r\n" }
        text += "Proxy-Connection: Keep-Alive\r\n\r\n"
        request = Array(text.utf8)
        parser = ResponseParser(isHeadRequest: true, limits: ResponseParser.Limits(maxHeaderBlockBytes: maxHeadBytes))
    }

    package func advance() -> ConnectionStepProgress {
        while written < request.count {
            let result = request.withUnsafeBytes { stream.write(UnsafeRawBufferPointer(rebasing: $0[written...])) }
            switch result {
            case .bytes(let n): written += n
            case .wouldBlock: return .wantWrite
            case .endOfFile:
                return .failed(.proxyTunnelFailed(message: "the proxy closed the connection before the CONNECT request was sent"))
            case .failed(let code): return .failed(.proxyTunnelFailed(message: "cannot send the CONNECT request: \(failureText(code))"))
            }
        }
        while true {
            let result = buffer.withUnsafeMutableBytes { stream.read(into: $0) }
            switch result {
            case .wouldBlock:
                return .wantRead
            case .endOfFile:
                if parser.hasReceivedBytes {
                    return .failed(.proxyTunnelFailed(message: "the proxy closed the connection in the middle of its answer to CONNECT"))
                }
                return .failed(.proxyTunnelFailed(message: "the proxy closed the connection without answering the CONNECT request"))
            case .failed(let code):
                return .failed(.proxyTunnelFailed(message: "the connection to the proxy failed: \(failureText(code))"))
            case .bytes(let n):
                if let progress = checkStart(n) ?? take(n) { return progress }
            }
        }
    }

    /// Fails at once when the answer does not start with `HTTP/` (a port that speaks something
    /// else), rather than waiting for a head that never comes.
    private func checkStart(_ count: Int) -> ConnectionStepProgress? {
        guard start.count < Self.httpPrefix.count else { return nil }
        for byte in buffer[0..<count] where !(start.isEmpty && (byte == 0x0D || byte == 0x0A)) {
            start.append(byte)
            if start.count == Self.httpPrefix.count { break }
        }
        guard !Self.httpPrefix.starts(with: start) else { return nil }
        let shown = String(decoding: buffer[0..<min(count, 64)], as: UTF8.self).escapingControlCharacters()
        return .failed(.proxyTunnelFailed(message: "the proxy's answer to CONNECT is not HTTP: \(quoted(shown))"))
    }

    /// Feeds `count` read bytes to the parser; nil while the head is not complete.
    private func take(_ count: Int) -> ConnectionStepProgress? {
        var offset = 0
        while offset < count {
            let parsed: (consumed: Int, event: ResponseParser.Event)
            do throws(HTTPParseError) {
                parsed = try buffer.withBytes { (raw) throws(HTTPParseError) in
                    try parser.parse(UnsafeRawBufferPointer(rebasing: raw[offset..<count]))
                }
            } catch {
                return .failed(.proxyTunnelFailed(message: "the proxy's answer to CONNECT is invalid: \(error)"))
            }
            offset += parsed.consumed
            switch parsed.event {
            case .needMore, .informational, .body, .end:
                continue
            case .head(let head):
                answer = head
                return verdict(on: head, leftover: count - offset)
            }
        }
        return nil
    }

    private func verdict(on head: ResponseHead, leftover: Int) -> ConnectionStepProgress {
        switch head.status {
        case 200..<300:
            guard leftover == 0 else { return bytesAfterAnswer(leftover, head) }
            // What came in a later segment (or TLS record) than the answer, before the client
            // spoke through the tunnel: the socket is asked once more, right before the
            // origin's TLS handshake (or request) starts. Bytes that arrive after the client
            // spoke cannot be told from the origin's: TLS refuses them as not TLS.
            let result = buffer.withUnsafeMutableBytes { stream.read(into: $0) }
            switch result {
            case .wouldBlock: return .done
            case .bytes(let n): return bytesAfterAnswer(n, head)
            case .endOfFile:
                return .failed(
                    .proxyTunnelFailed(message: "the proxy closed the connection right after its \(head.status) answer to CONNECT"))
            case .failed(let code):
                return .failed(.proxyTunnelFailed(message: "the connection to the proxy failed: \(failureText(code))"))
            }
        case 407:
            return .failed(.proxyAuthenticationRequired(challenge: head.firstValue("Proxy-Authenticate") ?? ""))
        default:
            return .failed(.proxyTunnelRefused(status: head.status, reasonPhrase: head.reason))
        }
    }

    private func bytesAfterAnswer(_ count: Int, _ head: ResponseHead) -> ConnectionStepProgress {
        .failed(
            .proxyTunnelFailed(
                message: "the proxy sent \(count) bytes after its \(head.status) answer to CONNECT, before the tunnel was used"))
    }

    private func failureText(_ code: Int32) -> String {
        stream.failuresAreTLSCodes ? tlsErrorMessage(code) : errnoMessage(code)
    }
}
