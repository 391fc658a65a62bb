import Logging

/// A swift-log `Logger` as the core's `LogSink`: the core's offline queue store logs through it.
final class SwiftLogSink: LogSink {
    let logger: Logger

    init(_ logger: Logger) {
        self.logger = logger
    }

    func log(_ level: LogLevel, _ message: String) {
        let mapped: Logger.Level
        switch level {
        case .trace: mapped = .trace
        case .debug: mapped = .debug
        case .info: mapped = .info
        case .notice: mapped = .notice
        case .warning: mapped = .warning
        case .error: mapped = .error
        case .critical: mapped = .critical
        }
        logger.log(level: mapped, "\(message)")
    }
}
