// fire-agent: TinyFire's device agent and on-board HTTP client. One entry point for both
// builds — the full-Swift one (`swift build`) and the Embedded one for boards
// (cross/embedded/build.sh) — running `AgentCommandLine`. The arguments come from
// /proc/self/cmdline: Embedded Swift has no `CommandLine`, and under some LD_PRELOAD libraries
// (libfaketime, which boards' test rigs use to move the clock) the full runtime learns none.
// Synchronous on purpose: an async main hands the main thread to dispatch_main, which ends it
// with pthread_exit; in a static executable that unwind sorts every frame descriptor of the
// binary (~5 ms of start-up, measured with callgrind).
import FireAgent

#if canImport(Glibc)
    import Glibc
#endif

var arguments: [String] = []
if let bytes = SystemFiles().readBytes("/proc/self/cmdline", limit: 1 << 20, whole: true) {
    var current: [UInt8] = []
    for byte in bytes {
        if byte == 0 {
            arguments.append(String(decoding: current, as: UTF8.self))
            current = []
        } else {
            current.append(byte)
        }
    }
    if !current.isEmpty { arguments.append(String(decoding: current, as: UTF8.self)) }
}
exit(AgentCommandLine.run(Array(arguments.dropFirst())))
