// fire-agent built in Embedded Swift (cross/embedded/build.sh): the commands on the core
// (`AgentCommandLine`). The arguments come from /proc/self/cmdline: Embedded Swift has no
// `CommandLine`.
import FireAgentBase

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
