import Synchronization
import TinyFire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension TinyFireError {
    /// The reason of an `.invalidProxy` alone (the proxy URL, password masked, and the problem),
    /// else the whole description.
    public var proxyReasonText: String {
        if case .invalidProxy(let reason) = self { return reason }
        return description
    }
}

extension AgentConfig {
    /// Reads and checks a config document held in `Data` (see `parse(_:file:machineIDPath:environment:)`).
    public static func parse(
        _ data: Data, file: String, machineIDPath: String = "/etc/machine-id",
        environment: (String) -> String? = ProxySettings.processEnvironment
    ) throws(ConfigError) -> AgentConfig {
        try parse([UInt8](data), file: file, machineIDPath: machineIDPath, environment: environment)
    }
}

/// A value shared across threads under a lock.
final class SendableBox<Value>: @unchecked Sendable {
    private let lock = Mutex(())
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { _ in stored } }
        set { lock.withLock { _ in stored = newValue } }
    }
}
