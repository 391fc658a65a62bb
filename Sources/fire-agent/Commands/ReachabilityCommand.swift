import ArgumentParser
import FireAgentCore
import TinyFire

#if canImport(Glibc)
    import Glibc
#endif

/// `fire-agent reachability`: the kernel's view of whether the network can be reached.
struct ReachabilityCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reachability",
        abstract: "Print whether the network is reachable, and through which interface (rtnetlink).",
        discussion: """
            Prints one line: 'reachable IFACE TYPE' (TYPE is ethernet, wifi, cellular or other), \
            'not-reachable' or 'unknown'. With --watch, prints the current state and then one line \
            per change until stopped. Without --watch the exit status is 0 when reachable and 1 \
            otherwise.
            """
    )

    @Flag(name: .long, help: "Keep running and print a line at every change.")
    var watch = false

    @Option(name: .long, help: "Judge the kernel's route to this host (name or address) instead of any default route.")
    var host: String?

    @Option(name: .long, help: "Watch the network namespace in FILE (e.g. /run/netns/NAME) instead of this process's.")
    var netns: String?

    func run() throws {
        let status = AgentCommandLine.reachability(host: host, namespace: netns, watch: watch)
        if status != 0 { throw ExitCode(status) }
    }
}

/// Writes `text` and a newline to stdout at once (no buffering: scripts read lines as they come).
func printLine(_ text: String) {
    let line = text + "\n"
    _ = line.withCString { write(STDOUT_FILENO, $0, strlen($0)) }
}

/// Unblocks SIGINT, SIGTERM and SIGHUP: a parent may start us with signals blocked (a spawning
/// thread's mask is inherited), and a command that runs until stopped must be stoppable.
func unblockTerminationSignals() {
    var signals = sigset_t()
    sigemptyset(&signals)
    for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, signal) }
    pthread_sigmask(SIG_UNBLOCK, &signals, nil)
}
