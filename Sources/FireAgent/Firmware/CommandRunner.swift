import CTinyFireSystem
import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// How a command ended.
package struct CommandResult: Sendable, Equatable {
    /// The exit code, when it exited.
    package var exitCode: Int32?
    /// The signal that ended it, when one did.
    package var signal: Int32?
    /// Killed because it ran past its timeout.
    package var timedOut: Bool
    /// The start of its output (stdout and stderr together), at most `CommandRunner`'s limit.
    package var output: [UInt8]
    /// Output bytes beyond the limit, not kept.
    package var droppedOutputBytes: Int

    /// Exited with 0 in time.
    package var succeeded: Bool { exitCode == 0 && !timedOut }

    /// `exit 3`, `killed by signal 9`, `timed out after 30m (killed)`.
    package var summary: String {
        if timedOut { return "timed out (killed)" }
        if let exitCode { return "exit \(exitCode)" }
        if let signal { return "killed by signal \(signal)" }
        return "ended"
    }

    /// The output as text, `…(N more bytes)` when cut.
    package var outputText: String {
        String(decoding: output, as: UTF8.self) + (droppedOutputBytes > 0 ? "…(\(droppedOutputBytes) more bytes)" : "")
    }
}

/// A command that could not be started.
package struct CommandError: Error, Sendable, CustomStringConvertible {
    /// argv[0].
    package let program: String
    /// Why.
    package let message: String
    /// `cannot run PROGRAM: message`.
    package var description: String { "cannot run \(program): \(message)" }
}

/// Runs the firmware commands (installer, reboot, commit, version): an argv list, no shell —
/// nothing from a manifest is ever interpreted by one — in a process group of its own, with
/// stdin from /dev/null, stdout and stderr captured together up to `outputLimit` bytes (the
/// rest counted, not kept: memory is bounded by the limit), default signal handling, and a
/// timeout after which the whole group gets SIGTERM, then SIGKILL 5 s later.
package enum CommandRunner {
    /// Output kept by default: 64 KiB.
    package static let defaultOutputLimit = 64 * 1024

    /// Runs `argv` to its end (blocking the calling thread).
    /// - Parameters:
    ///   - argv: program (looked up in PATH when it has no slash) and arguments.
    ///   - timeout: the longest it may run.
    ///   - outputLimit: output bytes kept.
    ///   - heldDescriptor: a descriptor the command inherits as its descriptor 3 and keeps
    ///     open for its life (the installer holds the install lock with it, so a restarted
    ///     agent can tell that it still runs).
    ///   - started: called once the command runs.
    /// - Returns: how it ended.
    /// - Throws: `CommandError` when it cannot be started.
    package static func run(
        _ argv: [String], timeout: Duration, outputLimit: Int = defaultOutputLimit, heldDescriptor: Int32? = nil,
        started: (() -> Void)? = nil
    ) throws(CommandError) -> CommandResult {
        guard let program = argv.first, !program.isEmpty else { throw CommandError(program: "", message: "no program given") }
        // Looked up here rather than left to posix_spawnp, whose exec failure some kernels'
        // and emulators' vfork paths report only as the child's exit 127.
        guard let path = executablePath(program) else {
            throw CommandError(program: program, message: errnoMessage(errno == 0 ? ENOENT : errno))
        }
        var ends: [Int32] = [-1, -1]
        guard tinyfire_pipe_cloexec(&ends) == 0 else {
            throw CommandError(program: program, message: "pipe: \(errnoMessage(errno))")
        }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)
        if let heldDescriptor { posix_spawn_file_actions_adddup2(&actions, heldDescriptor, 3) }
        // Nothing else of the agent's: a descriptor another thread opened without O_CLOEXEC
        // (a file being written, a socket) would otherwise live as long as the command, which
        // for an installer may be minutes and for a reboot command the rest of the boot. (A
        // file held open for writing that way also makes exec of it fail: ETXTBSY.)
        tinyfire_spawn_addclosefrom(&actions, heldDescriptor == nil ? 3 : 4)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let arguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in arguments { free(pointer) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, path, &actions, &attributes, arguments, tinyfire_environment())
        close(writeEnd)
        guard spawned == 0 else {
            close(readEnd)
            throw CommandError(program: program, message: errnoMessage(spawned))
        }
        defer { close(readEnd) }
        _ = fcntl(readEnd, F_SETFL, O_NONBLOCK)
        started?()

        var result = CommandResult(exitCode: nil, signal: nil, timedOut: false, output: [], droppedOutputBytes: 0)
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        let deadline = Instant.now() + timeout
        var killAt: Instant?
        var status: Int32 = 0
        var pipeOpen = true
        func drain() {
            while pipeOpen {
                let count = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else {
                    if count == 0 { pipeOpen = false }
                    return
                }
                let kept = min(count, max(0, outputLimit - result.output.count))
                result.output.append(contentsOf: buffer[0..<kept])
                result.droppedOutputBytes += count - kept
            }
        }
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid || (reaped < 0 && errno == ECHILD) {
                drain()  // what it wrote before exiting (a grandchild holding the pipe is not waited for)
                break
            }
            let now = Instant.now()
            if !result.timedOut, now >= deadline {
                result.timedOut = true
                kill(-pid, SIGTERM)
                killAt = now + .seconds(5)
            } else if let at = killAt, now >= at {
                kill(-pid, SIGKILL)
                killAt = nil
            }
            if pipeOpen {
                var descriptor = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, 100)
                drain()
            } else {
                usleep(20_000)
            }
        }
        if result.timedOut { kill(-pid, SIGKILL) }  // what the group left running
        if status & 0x7f == 0 {
            result.exitCode = (status >> 8) & 0xff
        } else {
            result.signal = status & 0x7f
        }
        return result
    }

    /// `program` if it has a slash and is executable, else the first executable `program` in
    /// `PATH` (default `/usr/bin:/bin`); nil with errno set when there is none.
    package static func executablePath(_ program: String) -> String? {
        if program.contains("/") {
            errno = 0
            return access(program, X_OK) == 0 ? program : nil
        }
        let search = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for directory in search.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = (directory.isEmpty ? "." : String(directory)) + "/" + program
            var info = stat()
            if stat(candidate, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), access(candidate, X_OK) == 0 {
                return candidate
            }
        }
        errno = ENOENT
        return nil
    }

    /// Replaces `{file}` and `{version}` in each argument (whole-string substitution, no
    /// splitting, no shell).
    package static func expand(_ argv: [String], file: String, version: String) -> [String] {
        argv.map { replacing(replacing($0, "{file}", with: file), "{version}", with: version) }
    }

    /// `text` with every `placeholder` replaced by `value`, left to right, never rescanning a
    /// replacement.
    package static func replacing(_ text: String, _ placeholder: String, with value: String) -> String {
        let bytes = Array(text.utf8)
        let pattern = Array(placeholder.utf8)
        guard !pattern.isEmpty, bytes.count >= pattern.count else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if index + pattern.count <= bytes.count, bytes[index..<index + pattern.count].elementsEqual(pattern) {
                out.append(contentsOf: value.utf8)
                index += pattern.count
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
