import CTinyFireSystem
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A program a test starts: spawned with a clean signal mask and default signal handling (the
/// test runner's threads block SIGTERM, SIGINT and SIGHUP, and a child inherits its parent
/// thread's mask, so a server started through Foundation's `Process` never sees the SIGTERM
/// meant to stop it), in a process group of its own, and stopped when the test process exits
/// if it is still running — whatever the outcome of the tests.
final class ChildProcess: @unchecked Sendable {
    /// Where a standard stream goes.
    enum Stream {
        case null
        /// Appended to this file.
        case file(String)
        /// A pipe the test reads (`stdoutPipe` / `stderrPipe`).
        case pipe
        /// A descriptor the caller owns (duplicated into the child).
        case descriptor(Int32)
    }

    let pid: pid_t
    /// Read ends of the `.pipe` streams (closed by `close()`, `run` or deinit).
    private(set) var stdoutPipe: Int32 = -1
    private(set) var stderrPipe: Int32 = -1
    private let state = Mutex<(reaped: Bool, status: Int32)>((false, 0))

    /// Starts `executable`.
    /// - Parameters:
    ///   - executable: an absolute path.
    ///   - arguments: argv after argv[0].
    ///   - environment: the whole environment; nil inherits the test process's.
    ///   - directory: the working directory; nil keeps the test process's.
    ///   - stdin, stdout, stderr: where the streams go; stdin `.null` by default.
    /// - Throws: `FixtureError` naming the program when posix_spawn fails.
    init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil,
        stdin: Stream = .null, stdout: Stream = .null, stderr: Stream = .null
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [Int32] = []
        var childEnds: [Int32] = []
        defer { for fd in childEnds { Glibc.close(fd) } }
        var readEnds: [Int32: Int32] = [:]
        for (target, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            switch stream {
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .descriptor(let fd):
                posix_spawn_file_actions_adddup2(&actions, fd, target)
            case .pipe:
                var ends: [Int32] = [-1, -1]
                guard tinyfire_pipe_cloexec(&ends) == 0 else {
                    throw FixtureError(description: "pipe: \(String(cString: strerror(errno)))")
                }
                let (parent, child) = target == 0 ? (ends[1], ends[0]) : (ends[0], ends[1])
                parentEnds.append(parent)
                childEnds.append(child)
                readEnds[target] = parent
                posix_spawn_file_actions_adddup2(&actions, child, target)
            }
        }
        if let directory { tinyfire_spawn_addchdir(&actions, directory) }
        // The child gets its three streams and nothing else of the test process, where other
        // suites' threads open files without O_CLOEXEC: a server started while a test wrote
        // its installer script held the script open for writing, and running it then failed
        // with ETXTBSY.
        tinyfire_spawn_addclosefrom(&actions, 3)

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
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let environmentList =
            environment.map { $0.map { "\($0.key)=\($0.value)" } }
            ?? ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" }
        let envp = environmentList.map { strdup($0) } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var child = pid_t()
        let status = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard status == 0 else {
            for fd in parentEnds { Glibc.close(fd) }
            throw FixtureError(description: "cannot start \(executable): \(String(cString: strerror(status)))")
        }
        pid = child
        stdoutPipe = readEnds[1] ?? -1
        stderrPipe = readEnds[2] ?? -1
        if let writeEnd = readEnds[0] { Glibc.close(writeEnd) }
        ChildProcess.live.withLock { $0[child] = WeakChild(self) }
        _ = ChildProcess.registerCleanup
    }

    deinit { closePipes() }

    /// Whether the process has not been reaped yet.
    var isRunning: Bool {
        if state.withLock({ $0.reaped }) { return false }
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid { record(status) }
        return result == 0
    }

    /// Waits for the process to end.
    /// - Returns: its exit status, or 128 + the signal that killed it.
    @discardableResult
    func wait() -> Int32 {
        while !state.withLock({ $0.reaped }) {
            var status: Int32 = 0
            let result = waitpid(pid, &status, 0)
            if result == pid {
                record(status)
            } else if result < 0 && errno != EINTR {
                break
            }
        }
        return exitStatus
    }

    /// The exit status after `wait()`, or 128 + the signal.
    var exitStatus: Int32 { state.withLock { $0.status } }

    /// Whether a signal ended it (after `wait()`).
    var wasSignalled: Bool { exitStatus > 128 }

    /// Each thread of the running child, one line each: its name, its state, and the kernel
    /// function it sleeps in (`ep_poll`: waiting in epoll; `futex_wait…`: waiting for a lock
    /// or a condition; `do_sys_poll`: in poll). For the message of a test that found the child
    /// stuck. Under qemu-user the child's threads are the emulator's, with the names it set.
    var threadReport: String {
        let tasks = "/proc/\(pid)/task"
        guard let ids = try? FileManager.default.contentsOfDirectory(atPath: tasks) else { return "no /proc/\(pid)/task" }
        func read(_ path: String) -> String {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return ids.sorted { (Int($0) ?? 0) < (Int($1) ?? 0) }.map { id in
            let stat = read("\(tasks)/\(id)/stat")
            // The state follows the parenthesised name, which may hold spaces.
            let state = stat.split(separator: ")").last?.split(separator: " ").first.map(String.init) ?? "?"
            return "\(id) \(read("\(tasks)/\(id)/comm")) \(state) \(read("\(tasks)/\(id)/wchan"))"
        }.joined(separator: "\n")
    }

    /// Sends `signal` to the process (not its group).
    func signal(_ signal: Int32) {
        if !state.withLock({ $0.reaped }) { kill(pid, signal) }
    }

    /// SIGTERM to the group, SIGKILL after `grace` if it is still there; then reaped.
    func stop(grace: Duration = .seconds(2)) {
        guard !state.withLock({ $0.reaped }) else { return }
        kill(-pid, SIGTERM)
        let deadline = ContinuousClock.now + grace
        while isRunning && ContinuousClock.now < deadline { usleep(10_000) }
        if isRunning { kill(-pid, SIGKILL) }
        wait()
    }

    /// Whether the child has executed `executable` (its command line names it). A child that
    /// has not is still the test process's fork: under qemu-user, which emulates posix_spawn's
    /// vfork by forking the multi-threaded emulator, such a child now and then deadlocks before
    /// execve and never runs the program.
    /// A child that has ended (its command line reads empty as a zombie) counts as started.
    func hasExecuted(_ executable: String) -> Bool {
        guard isRunning, let line = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !line.isEmpty else { return true }
        return String(decoding: line, as: UTF8.self).contains(executable)
    }

    /// Reads both `.pipe` streams to their end (concurrently, so neither fills up), then
    /// waits for the process.
    /// - Parameter neverExecuted: when given, a child that after `limit` still has not executed
    ///   `program` (`hasExecuted`) is killed, and the answer is nil.
    func collectOutput(neverExecuted: (program: String, limit: Duration)? = nil) -> CLIResult? {
        var out = Data()
        var err = Data()
        var fds = [stdoutPipe, stderrPipe].filter { $0 >= 0 }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let started = ContinuousClock.now
        var watching = neverExecuted
        while !fds.isEmpty {
            var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polls, nfds_t(polls.count), watching == nil ? -1 : 1000)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if let (program, limit) = watching, ContinuousClock.now - started >= limit {
                if hasExecuted(program) {
                    watching = nil
                } else {
                    kill(pid, SIGKILL)
                    closePipes()
                    wait()
                    return nil
                }
            }
            for entry in polls where entry.revents != 0 {
                let n = read(entry.fd, &buffer, buffer.count)
                if n > 0 {
                    if entry.fd == stdoutPipe { out.append(contentsOf: buffer[0..<n]) } else { err.append(contentsOf: buffer[0..<n]) }
                } else if n == 0 || errno != EINTR {
                    fds.removeAll { $0 == entry.fd }
                }
            }
        }
        closePipes()
        return CLIResult(status: wait(), stdout: out, stderr: String(decoding: err, as: UTF8.self))
    }

    /// Closes the read ends of the pipes.
    func closePipes() {
        if stdoutPipe >= 0 { Glibc.close(stdoutPipe) }
        if stderrPipe >= 0 { Glibc.close(stderrPipe) }
        stdoutPipe = -1
        stderrPipe = -1
    }

    private func record(_ status: Int32) {
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        state.withLock { $0 = (true, code) }
        ChildProcess.live.withLock { _ = $0.removeValue(forKey: pid) }
    }

    // MARK: - Stopped at exit

    private struct WeakChild: @unchecked Sendable {
        weak var child: ChildProcess?
        init(_ child: ChildProcess) { self.child = child }
    }

    /// Children not reaped yet, by pid (also those whose object is gone).
    private static let live = Mutex<[pid_t: WeakChild]>([:])

    /// At exit: SIGTERM to every live child's group, SIGKILL after two seconds to any left.
    private static let registerCleanup: Void = {
        atexit {
            let pids = Array(ChildProcess.live.withLock { $0.keys })
            for pid in pids { kill(-pid, SIGTERM) }
            var waited = 0
            var remaining = pids
            while !remaining.isEmpty && waited < 200 {
                remaining = remaining.filter { waitpid($0, nil, WNOHANG) == 0 }
                if !remaining.isEmpty { usleep(10_000) }
                waited += 1
            }
            for pid in remaining { kill(-pid, SIGKILL) }
        }
    }()
}

/// Runs a program to its end with stdin empty, capturing stdout and stderr.
func runCapturingOutput(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil
) throws -> CLIResult {
    for _ in 1...3 {
        let child = try ChildProcess(executable, arguments, environment: environment, directory: directory, stdout: .pipe, stderr: .pipe)
        if let result = child.collectOutput(neverExecuted: (executable, .seconds(20))) { return result }
        // The child never ran the program (see `hasExecuted`): not the program's doing; again.
        print("ChildProcess: \(executable) was not started within 20 s (a fork stuck before execve, as qemu-user's can be); again")
    }
    throw FixtureError(description: "\(executable) was not started in three attempts (each child stuck before execve)")
}
