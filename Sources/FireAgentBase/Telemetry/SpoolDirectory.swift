import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// What one pass over the spool did.
public struct SpoolPass: Sendable, Equatable {
    /// Lines queued.
    public var queuedLines = 0
    /// Lines refused (kept in `rejected/`), and files set aside whole (one each).
    public var rejectedLines = 0
    /// Entries set aside whole without being read (symlinks, FIFOs, hard links, too large).
    public var setAside = 0
    /// Whether the queue refused a batch: the files left wait as they are.
    public var blocked = false
}

/// The spool directory, read as untrusted input: whoever may write it (a group of programs on
/// the board) must not be able to make the agent read, write or wait on anything else.
///
/// - The directory is opened once; every entry is opened relative to it with
///   `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY` and judged by `fstat` on the open descriptor. Only a regular
///   file with one link is read; a symlink, FIFO, socket, device, directory or hard link is moved
///   to `rejected/` by name with a reason, never opened for reading, never waited on.
/// - `rejected/` is created by the agent (mode 0750) and used only while it is the agent's own
///   and writable by nobody else; it is reached through its descriptor, never by a path, and a
///   file of refused lines is appended to only when it is a regular file of the agent's with one link.
/// - A file is read as a stream through a fixed buffer (`readBufferBytes`) and cut into lines
///   by `SpoolLineSplitter`: memory is the buffer, one line (`maxLineBytes`) and the batch.
/// - How far a file is queued is kept in `SpoolProgress` beside the queue, so a kill or a full
///   queue in the middle neither loses lines nor queues more than one batch again, and lines
///   without a time keep the time the file was first read. A file stays in the spool untouched
///   until all of it is queued, then it is removed.
///
/// Not thread-safe by itself: `take` runs under the agent's sync, one pass at a time (a lock
/// makes a second caller wait).
package final class SpoolDirectory: Sendable {
    /// Bytes read from a spool file at a time.
    package static let readBufferBytes = 64 << 10
    /// Refused lines are written to `rejected/` once this many bytes of them are waiting.
    package static let rejectedFlushBytes = 64 << 10
    /// The name of the agent's own subdirectory in the spool.
    package static let rejectedName = "rejected"

    package let path: String
    package let progressPath: String
    package let maxFileBytes: Int
    package let maxLineBytes: Int
    package let logger: Logger

    fileprivate struct State: Sendable {
        var directory: Int32 = -1
        var blocked = false
        var openFailureReported = false
        var rejectedProblemReported = false
        var progressProblemReported = false
        var listFailureReported = false
        /// The progress file's last sequence number, and whether its record names a file.
        var progressSequence: UInt64 = 0
        var progressActive = false
        /// Entries that could not be set aside, reported once each.
        var reported: Set<String> = []
    }
    private let state = Locked(State())

    /// - Parameters:
    ///   - path: the spool directory.
    ///   - progressPath: the progress record's file, in the agent's own state directory.
    ///   - maxFileBytes: larger files are set aside unread.
    ///   - maxLineBytes: longer lines are refused (they fit no batch).
    package init(path: String, progressPath: String, maxFileBytes: Int, maxLineBytes: Int, logger: Logger) {
        self.path = path
        self.progressPath = progressPath
        self.maxFileBytes = maxFileBytes
        self.maxLineBytes = maxLineBytes
        self.logger = logger
    }

    deinit {
        state.withLock { state in
            if state.directory >= 0 { close(state.directory) }
        }
    }

    /// Takes the spool: every file's valid lines into `batcher` and on to `enqueue` in batches
    /// of consecutive lines of one file; refused lines to `rejected/<file>`; a file is removed
    /// once all of it is queued. Stops at the first batch `enqueue` refuses.
    /// - Parameters:
    ///   - batcher: cuts the batches (empty when called; left empty).
    ///   - stamp: the time for lines without one, asked once per file (in the config's precision).
    ///   - enqueue: queues a batch durably; false when the queue takes no more.
    package func take(batcher: inout Batcher, stamp: () -> Int64, enqueue: (Batch) -> Bool) -> SpoolPass {
        state.withLock { state in
            var pass = SpoolPass()
            guard let directory = openDirectory(&state) else { return pass }
            var rejected = RejectedDirectory(spool: directory)
            defer { rejected.release() }
            var filling = Filling(memoryLines: batcher.pending.points)
            /// Queues the batch filled across files, then removes them; before each new listing
            /// (a carried file is still in the directory until then) and at the end.
            func finishFilling() {
                guard !filling.carried.isEmpty else { return }
                if !pass.blocked, let rest = batcher.flush() {
                    if enqueue(rest) {
                        pass.queuedLines += rest.lines.count - filling.memoryLines
                        removeCarried(&filling, directory: directory)
                        return
                    }
                    pass.blocked = true
                    // Not queued: those files stay and are read again (their lines were not sent).
                    abandon(&filling, batcher: &batcher, unqueued: rest)
                }
                abandon(&filling, batcher: &batcher)
            }
            var progress = readProgress(&state)
            var waiting = 0
            var movedBefore = 0
            // Names are listed in bounded slices (the first `namesPerListing` in name order), so
            // a writer who makes a million files costs a bounded list, not a million names.
            for _ in 0..<Self.listingsPerTake {
                let (names, failure) = listNames(directory, first: progress?.name)
                noteListing(failure: failure, state: &state)
                if let record = progress, names.first != record.name {
                    clearProgress(state: &state)
                    progress = nil
                }
                for name in names {
                    var file = FileTake(name: name, directory: directory, owner: self)
                    file.run(
                        resume: progress, batcher: &batcher, filling: &filling, stamp: stamp, enqueue: enqueue, rejected: &rejected,
                        state: &state)
                    progress = nil
                    pass.queuedLines += file.queuedLines
                    pass.rejectedLines += file.rejectedLines
                    if file.setAside { pass.setAside += 1 }
                    if file.blocked {
                        pass.blocked = true
                        break
                    }
                }
                finishFilling()
                waiting = names.count
                let moved = pass.queuedLines + pass.rejectedLines + pass.setAside
                // Drained, blocked, or nothing moved (files that stay, relisted): the next sync.
                if pass.blocked || failure != nil || names.count < Self.namesPerListing || moved == movedBefore { break }
                movedBefore = moved
            }
            finishFilling()
            if rejected.problem != nil, !state.rejectedProblemReported {
                state.rejectedProblemReported = true
                logger.error(
                    "spool: refused lines and set-aside files cannot be kept",
                    metadata: ["directory": "\(path)/\(Self.rejectedName)", "reason": "\(rejected.problem ?? "")"])
            }
            if pass.blocked != state.blocked {
                state.blocked = pass.blocked
                if pass.blocked {
                    logger.warning(
                        "spool files wait where they are: the queue takes no more (logged once until it does)",
                        metadata: ["directory": "\(path)", "files": "\(waiting)\(waiting >= Self.namesPerListing ? " or more" : "")"])
                } else {
                    logger.info("spool files are taken again: the queue has room", metadata: ["directory": "\(path)"])
                }
            }
            return pass
        }
    }

    // MARK: - The directory

    private func openDirectory(_ state: inout State) -> Int32? {
        if state.directory >= 0 { return state.directory }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if !state.openFailureReported {
                state.openFailureReported = true
                logger.warning("spool directory cannot be opened", metadata: ["directory": "\(path)", "reason": "\(errnoMessage(code))"])
            }
            return nil
        }
        state.openFailureReported = false
        var info = stat()
        if fstat(fd, &info) == 0, info.st_mode & 0o022 != 0, info.st_mode & mode_t(S_ISVTX) == 0 {
            logger.warning(
                "spool directory is writable by others without the sticky bit: writers can remove each other's files",
                metadata: ["directory": "\(path)", "mode": "\(String(info.st_mode & 0o7777, radix: 8))"])
        }
        state.directory = fd
        return fd
    }

    /// Names listed at once: at most this many (plus as many again while sorting) are held.
    package static let namesPerListing = 256
    /// Listings per `take`: up to 16,384 files a sync; the rest at the next.
    package static let listingsPerTake = 64

    /// The entries to take, in name order: not hidden (a writer's file still being written),
    /// not `rejected`; the first `namesPerListing` of them, after `first` when it is there (the
    /// file whose progress is recorded). Memory: at most 2 × `namesPerListing` names.
    /// - Returns: the names, and the error that cut the listing short (the names read before
    ///   it are still taken; the others wait for a listing that succeeds).
    private func listNames(_ directory: Int32, first: String?) -> (names: [String], failure: Int32?) {
        let copy = dup(directory)
        guard copy >= 0, let stream = fdopendir(copy) else {
            let code = errno
            if copy >= 0 { close(copy) }
            return ([], code)
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var names: [String] = []
        var sawFirst = false
        let failure = readDirectoryNames(stream) { name in
            guard !name.hasPrefix("."), name != Self.rejectedName else { return }
            if name == first {
                sawFirst = true
                return
            }
            names.append(name)
            if names.count >= 2 * Self.namesPerListing {
                names.sort()
                names.removeLast(names.count - Self.namesPerListing)
            }
        }
        names.sort()
        if names.count > Self.namesPerListing { names.removeLast(names.count - Self.namesPerListing) }
        if sawFirst, let first { names.insert(first, at: 0) }
        return (names, failure)
    }

    /// Logs a listing that failed once, until one succeeds again.
    private func noteListing(failure: Int32?, state: inout State) {
        guard let failure else {
            if state.listFailureReported {
                state.listFailureReported = false
                logger.info("spool directory can be listed again", metadata: ["directory": "\(path)"])
            }
            return
        }
        guard !state.listFailureReported else { return }
        state.listFailureReported = true
        logger.error(
            "spool directory listing stopped on an error: the files not listed wait until it can be listed (logged once until then)",
            metadata: ["directory": "\(path)", "reason": "\(errnoMessage(failure))"])
    }

    // MARK: - Progress

    private func readProgress(_ state: inout State) -> SpoolProgress? {
        let fd = open(progressPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            state.progressSequence = 0
            state.progressActive = false
            return nil
        }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 2 * SpoolProgressSlots.slotBytes)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0, let (sequence, record) = SpoolProgressSlots.decode(Array(buffer[..<count])) else {
            logger.warning("spool progress record unreadable: taken as none", metadata: ["file": "\(progressPath)"])
            state.progressActive = true  // whatever is there is overwritten by the next write
            return nil
        }
        state.progressSequence = sequence
        state.progressActive = record != nil
        return record
    }

    /// Writes the record (nil: no file in progress) durably: into the slot the last write did
    /// not use, with one `fdatasync`.
    /// - Returns: false (logged once per spell) when it could not.
    fileprivate func writeProgress(_ record: SpoolProgress?, state: inout State) -> Bool {
        let fd = open(progressPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        var failure: Int32 = 0
        if fd < 0 {
            failure = errno
        } else {
            var info = stat()
            let created = fstat(fd, &info) == 0 && info.st_size == 0
            let sequence = state.progressSequence + 1
            let slot = SpoolProgressSlots.encode(record, sequence: sequence)
            let offset = off_t(Int(sequence % 2) * SpoolProgressSlots.slotBytes)
            let written = slot.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, offset) }
            if written < 0 {
                failure = errno
            } else if written != slot.count {
                failure = ENOSPC
            } else if fdatasync(fd) != 0 {
                failure = errno
            } else {
                state.progressSequence = sequence
                state.progressActive = record != nil
            }
            close(fd)
            if failure == 0 && created { syncParent(of: progressPath) }
        }
        if failure == 0 {
            state.progressProblemReported = false
            return true
        }
        if !state.progressProblemReported {
            state.progressProblemReported = true
            logger.error("spool progress not saved", metadata: ["file": "\(progressPath)", "reason": "\(errnoMessage(failure))"])
        }
        return false
    }

    /// Records that no file is in progress (once: nothing is written when none was).
    fileprivate func clearProgress(state: inout State) {
        if state.progressActive { _ = writeProgress(nil, state: &state) }
    }

    private func syncParent(of file: String) {
        let parent = file.lastIndex(of: "/").map { String(file[..<$0]) } ?? "."
        let fd = open(parent.isEmpty ? "/" : parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    /// A batch being filled across files (and after the collectors' points): the files whose
    /// lines are all in it are removed only once it is queued.
    private struct Filling {
        /// Lines at the batch's start that came from memory (the collectors), not from files:
        /// kept when the batch is given up.
        var memoryLines: Int
        /// Files read whole whose lines all wait in the batch, in order.
        var carried: [String] = []
    }

    /// Removes the carried files: their lines are queued.
    private func removeCarried(_ filling: inout Filling, directory: Int32) {
        for name in filling.carried where unlinkat(directory, name, 0) != 0 {
            logger.error("spool file queued but not removed", metadata: ["file": "\(name)", "reason": "\(errnoMessage(errno))"])
        }
        filling.carried = []
        filling.memoryLines = 0
    }

    /// Gives up the batch being filled (it cannot be queued): lines from files are dropped, the
    /// files stay for the next pass; the collectors' points stay pending.
    /// - Parameter unqueued: the completed batch the queue refused (it holds the collectors'
    ///   points, if any are left), or nil when they are still in `batcher`.
    private func abandon(_ filling: inout Filling, batcher: inout Batcher, unqueued: Batch? = nil) {
        if let unqueued {
            batcher.keepFirst(0)
            for line in unqueued.lines.prefix(filling.memoryLines) { _ = try? batcher.add(line) }
        } else {
            batcher.keepFirst(filling.memoryLines)
        }
        filling.carried = []
    }

    // MARK: - One file

    /// Taking one entry of the spool.
    private struct FileTake {
        let name: String
        let directory: Int32
        let owner: SpoolDirectory
        var queuedLines = 0
        var rejectedLines = 0
        var setAside = false
        var blocked = false

        init(name: String, directory: Int32, owner: SpoolDirectory) {
            self.name = name
            self.directory = directory
            self.owner = owner
        }

        mutating func run(
            resume: SpoolProgress?, batcher: inout Batcher, filling: inout Filling, stamp: () -> Int64, enqueue: (Batch) -> Bool,
            rejected: inout RejectedDirectory, state: inout State
        ) {
            // A first look without following or opening: only a regular file is opened at all.
            var info = stat()
            guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return }  // gone meanwhile
            guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
                return putAside(Self.kind(info.st_mode), rejected: &rejected, state: &state)
            }
            let fd = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
            guard fd >= 0 else {
                let code = errno
                switch code {
                case ENOENT: return
                case ELOOP: return putAside("a symbolic link", rejected: &rejected, state: &state)
                case ENXIO: return putAside("a socket", rejected: &rejected, state: &state)
                default:
                    owner.logger.warning("spool file cannot be opened", metadata: ["file": "\(name)", "reason": "\(errnoMessage(code))"])
                    return
                }
            }
            defer { close(fd) }
            // The entry may have been swapped between the look and the open: judge what was opened.
            guard fstat(fd, &info) == 0 else { return }
            guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
                return putAside(Self.kind(info.st_mode), rejected: &rejected, state: &state)
            }
            guard info.st_nlink == 1 else {
                return putAside("a file with \(info.st_nlink) hard links (another name for it exists)", rejected: &rejected, state: &state)
            }
            guard Int64(info.st_size) <= Int64(owner.maxFileBytes) else {
                return putAside(
                    "\(info.st_size) bytes, more than telemetry.spoolMaxFileBytes (\(owner.maxFileBytes))", rejected: &rejected,
                    state: &state)
            }
            readLines(
                fd, info: info, resume: resume, batcher: &batcher, filling: &filling, stamp: stamp, enqueue: enqueue, rejected: &rejected,
                state: &state)
        }

        private mutating func readLines(
            _ fd: Int32, info: stat, resume: SpoolProgress?, batcher: inout Batcher, filling: inout Filling, stamp: () -> Int64,
            enqueue: (Batch) -> Bool, rejected: inout RejectedDirectory, state: inout State
        ) {
            let size = Int64(info.st_size)
            let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
            let device = UInt64(info.st_dev)
            let inode = UInt64(info.st_ino)
            let resumed = resume.flatMap { $0.matches(device: device, inode: inode, size: size, modified: modified) ? $0 : nil }
            if resume != nil && resumed == nil { owner.clearProgress(state: &state) }
            let fileStamp = resumed?.stamp ?? stamp()
            var recorded = resumed != nil
            var splitter = SpoolLineSplitter(
                maxLineBytes: owner.maxLineBytes, offset: resumed?.offset ?? 0, lineNumber: resumed?.lineNumber ?? 0)
            if splitter.offset > 0, lseek(fd, off_t(splitter.offset), SEEK_SET) < 0 { return }
            var refused = ""
            var stamped = false
            // Where the last line handed out ends, and its number: a batch completed by a line
            // holds the lines before it.
            var lineEnd = splitter.offset
            var lineNumber = splitter.lineNumber

            /// Queues one batch of this file's lines, which runs to `end`; records progress.
            func queue(_ batch: PendingBatch, upTo end: Int64, line: Int, more: Bool) -> Bool {
                func record(_ offset: Int64, _ number: Int) -> Bool {
                    let progress = SpoolProgress(
                        name: name, device: device, inode: inode, size: size, modified: modified, offset: offset,
                        lineNumber: number, stamp: fileStamp)
                    return owner.writeProgress(progress, state: &state)
                }
                // Lines stamped now must be stamped the same if this batch is queued again.
                if stamped && !recorded {
                    guard record(batch.startOffset, batch.startLine) else { return false }
                    recorded = true
                }
                guard enqueue(batch.batch) else { return false }
                // The batch may open with the collectors' points: they are not spool lines.
                queuedLines += batch.batch.lines.count - filling.memoryLines
                owner.removeCarried(&filling, directory: directory)
                if !refused.isEmpty {
                    rejected.append(refused, to: name)
                    refused = ""
                }
                if more, record(end, line) { recorded = true }
                return true
            }

            /// The batch the queue refused, if one was.
            var unqueued: Batch?
            var buffer = [UInt8](repeating: 0, count: SpoolDirectory.readBufferBytes)
            var batchStart = (offset: splitter.offset, line: splitter.lineNumber)
            reading: while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count < 0 {
                    owner.logger.warning("spool file cannot be read", metadata: ["file": "\(name)", "reason": "\(errnoMessage(errno))"])
                    owner.abandon(&filling, batcher: &batcher)
                    return
                }
                if count == 0 { break }
                let going = buffer.withUnsafeBytes { raw in
                    splitter.feed(UnsafeRawBufferPointer(rebasing: raw[..<count])) { line in
                        switch SpoolLineVerdict.judge(line, timestamp: fileStamp) {
                        case .skip: break
                        case .refused(let text, let reason):
                            rejectedLines += 1
                            owner.logger.warning(
                                "spool line rejected", metadata: ["file": "\(name)", "line": "\(line.number)", "reason": "\(reason)"])
                            refused += "# \(name):\(line.number): \(reason)\n\(text)\n"
                            if refused.utf8.count >= SpoolDirectory.rejectedFlushBytes {
                                rejected.append(refused, to: name)
                                refused = ""
                            }
                        case .point(let point, let wasStamped):
                            if let completed = try? batcher.add(point) {
                                let pending = PendingBatch(batch: completed, startOffset: batchStart.offset, startLine: batchStart.line)
                                guard queue(pending, upTo: lineEnd, line: lineNumber, more: true) else {
                                    blocked = true
                                    unqueued = completed
                                    return false
                                }
                                batchStart = (lineEnd, lineNumber)
                            }
                            stamped = stamped || wasStamped
                        }
                        lineEnd = line.end
                        lineNumber = line.number
                        return true
                    }
                }
                if !going { break reading }
            }
            if blocked {
                owner.abandon(&filling, batcher: &batcher, unqueued: unqueued)
                return
            }
            if let last = splitter.finish(), case .refused(let text, let reason) = SpoolLineVerdict.judge(last, timestamp: nil) {
                rejectedLines += 1
                owner.logger.warning("spool line rejected", metadata: ["file": "\(name)", "line": "\(last.number)", "reason": "\(reason)"])
                refused += "# \(name):\(last.number): \(reason)\n\(text)\n"
            }
            // A file read whole, whose lines carry their own times and are all waiting in the
            // batch: the next file fills the batch further, and this one goes once it is queued.
            // (Lines the agent stamped end their batch here: their time is recorded for it.)
            if resumed == nil, !stamped, !recorded, rejectedLines == 0, refused.isEmpty, batcher.pending.points > filling.memoryLines {
                filling.carried.append(name)
                return
            }
            if let rest = batcher.flush() {
                let pending = PendingBatch(batch: rest, startOffset: batchStart.offset, startLine: batchStart.line)
                guard queue(pending, upTo: size, line: splitter.lineNumber, more: false) else {
                    blocked = true
                    owner.abandon(&filling, batcher: &batcher, unqueued: rest)
                    return
                }
            }
            if !refused.isEmpty { rejected.append(refused, to: name) }
            // All of it is queued: the file goes, then its record (a record for a file that is
            // gone is dropped at the next pass).
            if unlinkat(directory, name, 0) != 0 {
                owner.logger.error("spool file queued but not removed", metadata: ["file": "\(name)", "reason": "\(errnoMessage(errno))"])
            }
            if recorded { owner.clearProgress(state: &state) }
        }

        private mutating func putAside(_ reason: String, rejected: inout RejectedDirectory, state: inout State) {
            rejectedLines += 1
            switch rejected.moveIn(name) {
            case .success(let now):
                setAside = true
                state.reported.remove(name)
                owner.logger.error(
                    "spool entry set aside, not read", metadata: ["file": "\(name)", "reason": "\(reason)", "now": "\(owner.path)/\(now)"])
            case .failure(let problem):
                rejectedLines -= 1
                if state.reported.insert(name).inserted {
                    owner.logger.error(
                        "spool entry neither read nor set aside (logged once)",
                        metadata: ["file": "\(name)", "reason": "\(reason)", "problem": "\(problem)"])
                }
            }
        }

        static func kind(_ mode: mode_t) -> String {
            switch mode & mode_t(S_IFMT) {
            case mode_t(S_IFLNK): "a symbolic link"
            case mode_t(S_IFIFO): "a FIFO"
            case mode_t(S_IFSOCK): "a socket"
            case mode_t(S_IFCHR): "a character device"
            case mode_t(S_IFBLK): "a block device"
            case mode_t(S_IFDIR): "a directory"
            default: "not a regular file"
            }
        }
    }

    private struct PendingBatch {
        var batch: Batch
        var startOffset: Int64
        var startLine: Int
    }
}

/// The spool's `rejected/`, reached through a descriptor, used only while it is the agent's own.
private struct RejectedDirectory {
    let spool: Int32
    private var fd: Int32 = -1
    private(set) var problem: String?

    init(spool: Int32) { self.spool = spool }

    struct Problem: Error, CustomStringConvertible { let description: String }

    private mutating func descriptor() -> Int32? {
        if fd >= 0 { return fd }
        if problem != nil { return nil }
        if mkdirat(spool, SpoolDirectory.rejectedName, 0o750) != 0 && errno != EEXIST {
            problem = "cannot create it: \(errnoMessage(errno))"
            return nil
        }
        let opened = openat(spool, SpoolDirectory.rejectedName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard opened >= 0 else {
            problem = errno == ELOOP || errno == ENOTDIR ? "it is not a directory" : "cannot open it: \(errnoMessage(errno))"
            return nil
        }
        var info = stat()
        guard fstat(opened, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            problem = "it is not the agent's own (owner uid \(info.st_uid), mode \(String(info.st_mode & 0o7777, radix: 8)))"
            closeDescriptor(opened)
            return nil
        }
        fd = opened
        return fd
    }

    /// Moves spool entry `name` in, never replacing anything: `name`, else `name.1` … `name.99`.
    mutating func moveIn(_ name: String) -> Result<String, Problem> {
        guard let fd = descriptor() else { return .failure(Problem(description: problem ?? "")) }
        for attempt in 0..<100 {
            let target = attempt == 0 ? name : "\(name).\(attempt)"
            if tinyfire_renameat_noreplace(spool, name, fd, target) == 0 { return .success("\(SpoolDirectory.rejectedName)/\(target)") }
            if errno != EEXIST { return .failure(Problem(description: errnoMessage(errno))) }
        }
        return .failure(Problem(description: "\(name) … \(name).99 are all taken in rejected/"))
    }

    /// Appends refused lines to `name`: only to a regular file of the agent's with one link.
    mutating func append(_ text: String, to name: String) {
        guard let directory = descriptor() else { return }
        let file = openat(directory, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o640)
        guard file >= 0 else { return }
        defer { closeDescriptor(file) }
        var info = stat()
        guard fstat(file, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), info.st_nlink == 1, info.st_uid == geteuid() else {
            return
        }
        _ = writeAll(file, Array(text.utf8))
    }

    mutating func release() {
        if fd >= 0 { closeDescriptor(fd) }
        fd = -1
    }
}
