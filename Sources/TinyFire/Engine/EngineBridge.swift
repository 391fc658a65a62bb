/// TinyFire's side of the core's engine: its settings from a `SessionConfiguration`, its
/// failures as `TinyFireError`, its measurements as `TransferMetrics`.

extension SessionConfiguration {
    /// What the core's engine runs this session's transfers with.
    var engineSettings: EngineSettings {
        var settings = EngineSettings.standard
        settings.connectTimeout = connectTimeout
        settings.idleTimeout = idleTimeout
        settings.totalTimeout = totalTimeout
        settings.lowSpeedLimit = lowSpeedLimit
        settings.maxReceiveBytesPerSecond = maxReceiveBytesPerSecond
        settings.maxHeaderBlockBytes = maxHeaderBlockBytes
        settings.readBufferSize = readBufferSize
        settings.maxConnectionsPerHost = maxConnectionsPerHost
        settings.idleConnectionTimeout = idleConnectionTimeout
        settings.maxRedirects = maxRedirects
        settings.allowsInsecureRedirects = allowsInsecureRedirects
        settings.automaticDecompression = automaticDecompression
        settings.defaultFields = headers.fields
        settings.expectContinueThreshold = expectContinueThreshold
        settings.tls = tls
        settings.proxy = proxy
        return settings
    }
}

extension TinyFireError {
    /// The error a transfer that ended with `failure` reports; `refusal` is what the request's
    /// trust evaluator or redirect handler said when the failure is theirs.
    init(_ failure: TransferFailure, refusal: TinyFireError?) {
        switch failure {
        case .invalidURL(let url, let reason): self = .invalidURL(url: url, reason: reason)
        case .invalidRequest(let reason): self = .invalidRequest(reason: reason)
        case .invalidTLSConfiguration(let reason): self = .invalidTLSConfiguration(reason: reason)
        case .explicitlyCancelled: self = .explicitlyCancelled
        case .engineShutDown: self = .sessionDeinitialized
        case .resourceExhausted(let message): self = .resourceExhausted(message)
        case .failed(let error): self = .sessionTaskFailed(error)
        case .refusedByOwner:
            // The request records its refusal before it answers; never without one.
            self = refusal ?? .explicitlyCancelled
        }
    }
}

extension TransferMetrics {
    /// The metrics of one transfer as the engine measured them.
    init(_ report: TransferReport) {
        self.init()
        redirects = report.redirects
        reusedConnection = report.reusedConnection
        retriedOnStaleConnection = report.retriedOnStaleConnection
        remoteAddress = report.remoteAddress
        nameLookup = report.nameLookup
        connect = report.connect
        tlsHandshake = report.tlsHandshake
        tls = report.tls.map(TLSDetails.init)
        requestSent = report.requestSent
        timeToFirstByte = report.timeToFirstByte
        total = report.total
        requestBytesSent = report.requestBytesSent
        responseBytesReceived = report.responseBytesReceived
        responseBodyBytes = report.responseBodyBytes
        decodedBodyBytes = report.decodedBodyBytes
    }
}
