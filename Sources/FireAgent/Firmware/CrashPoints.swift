#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Crash points for the tests that kill the agent at every step of an update: with
/// `FIRE_AGENT_FIRMWARE_EXIT_AT=STEP` in its environment, the agent exits (status 86) right after
/// persisting that step, while the installer runs (`installing`), or after the installer and
/// before recording its outcome (`installer-exited`).
///
/// A seam for test builds only: it exists when the package is compiled with
/// `FIRE_AGENT_CRASH_POINTS`, which Package.swift defines for debug builds (what `swift build`
/// and the tests use). Release binaries — the static build, the cross builds — contain neither
/// the code nor the variable's name, and ignore the environment (cross/smoke.sh checks).
package struct CrashPoints: Sendable {
    private let step: String?

    /// Reads the crash point from `environment` (test builds only).
    package init(environment: [String: String]) {
        #if FIRE_AGENT_CRASH_POINTS
            step = environment["FIRE_AGENT_FIRMWARE_EXIT_AT"]
        #else
            step = nil
        #endif
    }

    /// Exits the process at once when `point` is the configured crash point (test builds only).
    package func exit(at point: String, _ what: String, logger: Logger) {
        #if FIRE_AGENT_CRASH_POINTS
            guard step == point else { return }
            logger.warning("FIRE_AGENT_FIRMWARE_EXIT_AT: exiting \(what)")
            _exit(86)
        #endif
    }
}
