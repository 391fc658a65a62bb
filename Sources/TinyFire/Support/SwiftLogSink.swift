import Logging

/// A swift-log `Logger` as the core's `LogSink`: the core's offline queue store logs through it.
final class SwiftLogSink: LogSink {
    let logger: Logger

    init(_ logger: Logger) {
        self.logger = logger
    }

    func log(_ level: LogLevel, _ message: String) {
        logger.log(level: level.swiftLogLevel, "\(message)")
    }
}

extension LogLevel {
    /// The same level in swift-log.
    package var swiftLogLevel: Logger.Level {
        switch self {
        case .trace: return .trace
        case .debug: return .debug
        case .info: return .info
        case .notice: return .notice
        case .warning: return .warning
        case .error: return .error
        case .critical: return .critical
        }
    }
}
