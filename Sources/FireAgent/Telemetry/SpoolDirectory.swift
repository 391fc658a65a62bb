import TinyFireCore

#if canImport(Glibc)
    import CTinyFireSystem
    import Glibc
#elseif canImport(Musl)
    import CTinyFireSystem
    import Musl
#endif

/// What one pass over the spool did.
package struct SpoolPass: Sendable, Equatable {
    /// Lines queued.
    package var queuedLines = 0
    /// Lines refused (kept in `rejected/`), and files set aside whole (one each).
    package var rejectedLines = 0
    /// Entries set aside whole: without being read (symlinks, FIFOs, hard links, too large,
    /// unreadable), or after too many refused lines, or because they grew while being read.
    package var setAside = 0
    /// Entries of `rejected/` removed to keep it within `telemetry.spoolRejectedMaxBytes` (oldest first).
    package var rejectedDropped = 0
    /// Whether the queue refused a batch: the files left wait as they are.
    package var blocked = false
    /// Whether the pass stopped at its deadline with files left (the next pass goes on).
    package var yielded = false
}

/// The spool directory, read as untrusted input: whoever may write it (a group of programs on
/// the board) must not be able to make the agent read, write or wait on anything else, nor make
/// one sync outlast its deadline, fill the disk with refusals, flood the log, or redo work
/// after a kill (DESIGN.md §4d).
///
/// - The directory is opened once; every entry is opened relative to it with
///   `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY` and judged by `fstat` on the open descriptor. Only a regular
///   file with one link is read; a symlink, FIFO, socket, device, directory, hard link or a file
///   the agent may not open is moved to `rejected/` by name (a rename needs no read access)
///   with a reason, never opened for reading, never waited on. An entry that cannot even be
///   moved is skipped for good (until the agent restarts), so no set of entries can keep the
///   ones behind them from being taken. Names are bytes from `readdir` to `unlinkat`
///   (`SpoolName`): a name that is not UTF-8 is taken like any other.
/// - `rejected/` is created by the agent (mode 0750) and used only while it is the agent's own
///   and writable by nobody else; it is reached through its descriptor, never by a path, and a
///   file of refused lines is appended to only when it is a regular file of the agent's with
///   one link. It is kept within `rejectedMaxBytes` on disk and `rejectedMaxEntries` entries:
///   past them an entry larger than the whole bound, then the oldest entries (by change time)
///   are removed, counted and logged.
/// - A file is read as a stream through a fixed buffer (`readBufferBytes`), never past the size
///   `fstat` judged (a file that grows while it is read is set aside whole once that size is
///   taken), and cut into lines by `SpoolLineSplitter`: memory is the buffer, one line
///   (`maxLineBytes`) and the batch. At most `maxRefusedLinesPerFile` refused lines of a file
///   are kept; at the next one the file is set aside whole by rename (never copied).
/// - How far a file is queued, and how far its refused lines are kept, is in `SpoolProgress`
///   beside the queue, so a kill or a full queue in the middle neither loses lines nor queues
///   more than one batch again, and keeps no refused line twice; lines without a time keep the
///   time the file was first read. A file stays in the spool untouched until all of it is
///   queued, then it is removed.
/// - The log gets one line per file (what was refused, what was done with it), at most
///   `loggedFilesPerPass` a pass and one line for the rest.
/// - A pass stops at its deadline (between two reads of a file, or two files), records where
///   it stopped, and says so (`SpoolPass.yielded`): the caller's loop answers its watchdog and
///   signals, and the next pass goes on from there.
///
/// Memory: the read buffer, one line, the batch; names listed in slices (2 × `namesPerListing`);
/// the names skipped for good (at most `maxSkippedNames`); while `rejected/` is trimmed, one
/// record per entry in it (at most `rejectedMaxEntries` and what one pass added).
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
    /// Refused lines kept per file: at the next one the rest of the file is not read, and the
    /// file is set aside whole.
    package static let maxRefusedLinesPerFile = 100
    /// Files logged one by one in a pass; the others are summed up in one line.
    package static let loggedFilesPerPass = 16
    /// Entries `rejected/` holds at most (the oldest go first).
    package static let rejectedMaxEntries = 4096
    /// Names remembered as neither readable nor movable (skipped for good).
    package static let maxSkippedNames = 4096

    package let path: String
    package let progressPath: String
    package let maxFileBytes: Int
    package let maxLineBytes: Int
    package let rejectedMaxBytes: Int
    package let device: SpoolLineVerdict.DeviceTag?
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
        /// Entries that could be neither read nor set aside: skipped from now on.
        var skipped: Set<SpoolName> = []
        var skippedFullReported = false
        /// Whether `rejected/` must be checked against its bounds (something moved in since).
        var rejectedGrew = true
        /// Entries removed from `rejected/` since the agent started.
        var rejectedDropped = 0
    }
    private let state = Locked(State())

    /// - Parameters:
    ///   - path: the spool directory.
    ///   - progressPath: the progress record's file, in the agent's own state directory.
    ///   - maxFileBytes: larger files are set aside unread.
    ///   - maxLineBytes: longer lines are refused (they fit no batch).
    ///   - rejectedMaxBytes: `rejected/` is kept within this many bytes on disk.
    ///   - device: the `device` tag every spool point gets; nil leaves lines as they are.
    ///   - logger: where the per-file summaries go.
    package init(
        path: String, progressPath: String, maxFileBytes: Int, maxLineBytes: Int, rejectedMaxBytes: Int = 4 << 20,
        device: SpoolLineVerdict.DeviceTag? = nil, logger: Logger
    ) {
        self.path = path
        self.progressPath = progressPath
        self.maxFileBytes = maxFileBytes
        self.maxLineBytes = maxLineBytes
        self.rejectedMaxBytes = rejectedMaxBytes
        self.device = device
        self.logger = logger
    }

    deinit {
        state.withLock { state in
            if state.directory >= 0 { close(state.directory) }
        }
    }

    /// Entries removed from `rejected/` to keep it within its bounds since the agent started.
    package var rejectedDropped: Int { state.withLock { $0.rejectedDropped } }

    /// Takes the spool: every file's valid lines into `batcher` and on to `enqueue` in batches
    /// of consecutive lines of one file; refused lines to `rejected/<file>`; a file is removed
    /// once all of it is queued. Stops at the first batch `enqueue` refuses, and at `deadline`.
    /// - Parameters:
    ///   - batcher: cuts the batches (empty when called; left empty).
    ///   - stamp: the time for lines without one, asked once per file (in the config's precision).
    ///   - deadline: when the pass stops, wherever it is (recorded; the next pass goes on); nil: none.
    ///   - enqueue: queues a batch durably; false when the queue takes no more.
    package func take(batcher: inout Batcher, stamp: () -> Int64, deadline: Instant? = nil, enqueue: (Batch) -> Bool) -> SpoolPass {
        state.withLock { state in
            var pass = SpoolPass()
            guard let directory = openDirectory(&state) else { return pass }
            var rejected = RejectedDirectory(spool: directory)
            var log = PassLog(limit: Self.loggedFilesPerPass)
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
            listing: for _ in 0..<Self.listingsPerTake {
                let (names, failure) = listNames(directory, first: progress?.name, skipped: state.skipped)
                noteListing(failure: failure, state: &state)
                if let record = progress, names.first != record.name {
                    clearProgress(state: &state)
                    progress = nil
                }
                for name in names {
                    if let deadline, Instant.now() >= deadline {
                        pass.yielded = true
                        break
                    }
                    var file = FileTake(name: name, directory: directory, owner: self, deadline: deadline)
                    file.run(
                        resume: progress, batcher: &batcher, filling: &filling, stamp: stamp, enqueue: enqueue, rejected: &rejected,
                        state: &state, log: &log)
                    progress = nil
                    pass.queuedLines += file.queuedLines
                    pass.rejectedLines += file.rejectedLines
                    if file.setAside { pass.setAside += 1 }
                    if file.blocked {
                        pass.blocked = true
                        break
                    }
                    if file.yielded {
                        pass.yielded = true
                        break
                    }
                }
                finishFilling()
                waiting = names.count
                let moved = pass.queuedLines + pass.rejectedLines + pass.setAside
                // Drained, blocked, out of time, or nothing moved (files that stay, relisted): the next sync.
                if pass.blocked || pass.yielded || failure != nil || names.count < Self.namesPerListing || moved == movedBefore {
                    break listing
                }
                movedBefore = moved
            }
            finishFilling()
            log.finish(logger, directory: path)
            if rejected.movedIn || rejected.appended { state.rejectedGrew = true }
            if state.rejectedGrew, rejected.problem == nil {
                state.rejectedGrew = false
                let (dropped, bytes) = rejected.trim(maxBytes: rejectedMaxBytes, maxEntries: Self.rejectedMaxEntries)
                if dropped > 0 {
                    pass.rejectedDropped = dropped
                    state.rejectedDropped += dropped
                    logger.warning(
                        "spool rejected/ over its bounds: the oldest entries removed",
                        metadata: [
                            "directory": "\(path)/\(Self.rejectedName)", "removed": "\(dropped)", "bytes": "\(bytes)",
                            "maxBytes": "\(rejectedMaxBytes)", "maxEntries": "\(Self.rejectedMaxEntries)",
                        ])
                }
            }
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
    /// not `rejected`, not skipped for good; the first `namesPerListing` of them, after `first`
    /// when it is there (the file whose progress is recorded). Memory: at most
    /// 2 × `namesPerListing` names.
    /// - Returns: the names, and the error that cut the listing short (the names read before
    ///   it are still taken; the others wait for a listing that succeeds).
    private func listNames(_ directory: Int32, first: SpoolName?, skipped: Set<SpoolName>) -> (names: [SpoolName], failure: Int32?) {
        let copy = dup(directory)
        guard copy >= 0, let stream = fdopendir(copy) else {
            let code = errno
            if copy >= 0 { close(copy) }
            return ([], code)
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var names: [SpoolName] = []
        var sawFirst = false
        let rejectedName = SpoolName(Self.rejectedName)
        let failure = readDirectoryNameBytes(stream) { bytes in
            let name = SpoolName(bytes: bytes)
            guard !name.isHidden, name != rejectedName, !skipped.contains(name) else { return }
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

    /// Remembers `name` as an entry that can be neither read nor set aside: it is left out of
    /// every listing from now on (until the agent restarts), so it holds up no other file.
    fileprivate func skipForGood(_ name: SpoolName, state: inout State) {
        guard state.skipped.count < Self.maxSkippedNames else {
            if !state.skippedFullReported {
                state.skippedFullReported = true
                logger.error(
                    "spool: too many entries that can be neither read nor set aside; the next ones are tried at every sync",
                    metadata: ["directory": "\(path)", "skipped": "\(state.skipped.count)"])
            }
            return
        }
        state.skipped.insert(name)
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
        var carried: [SpoolName] = []
    }

    /// Removes the carried files: their lines are queued.
    private func removeCarried(_ filling: inout Filling, directory: Int32) {
        for name in filling.carried where name.withCString({ unlinkat(directory, $0, 0) }) != 0 {
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
        let name: SpoolName
        let directory: Int32
        let owner: SpoolDirectory
        let deadline: Instant?
        var queuedLines = 0
        var rejectedLines = 0
        var setAside = false
        var blocked = false
        var yielded = false

        init(name: SpoolName, directory: Int32, owner: SpoolDirectory, deadline: Instant?) {
            self.name = name
            self.directory = directory
            self.owner = owner
            self.deadline = deadline
        }

        mutating func run(
            resume: SpoolProgress?, batcher: inout Batcher, filling: inout Filling, stamp: () -> Int64, enqueue: (Batch) -> Bool,
            rejected: inout RejectedDirectory, state: inout State, log: inout PassLog
        ) {
            // A first look without following or opening: only a regular file is opened at all.
            var info = stat()
            guard name.withCString({ fstatat(directory, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
                let code = errno
                if code != ENOENT {  // gone meanwhile: nothing to do
                    putAside("cannot be examined: \(errnoMessage(code))", rejected: &rejected, state: &state, log: &log)
                }
                return
            }
            guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
                return putAside(Self.kind(info.st_mode), rejected: &rejected, state: &state, log: &log)
            }
            let fd = name.withCString { openat(directory, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
            guard fd >= 0 else {
                let code = errno
                switch code {
                case ENOENT: return
                case ELOOP: return putAside("a symbolic link", rejected: &rejected, state: &state, log: &log)
                case ENXIO: return putAside("a socket", rejected: &rejected, state: &state, log: &log)
                default:
                    // Not the agent's to read (mode 000 under a root without CAP_DAC_OVERRIDE):
                    // a rename needs no read access, so it leaves the way free.
                    return putAside("cannot be opened: \(errnoMessage(code))", rejected: &rejected, state: &state, log: &log)
                }
            }
            defer { close(fd) }
            // The entry may have been swapped between the look and the open: judge what was opened.
            guard fstat(fd, &info) == 0 else { return }
            guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
                return putAside(Self.kind(info.st_mode), rejected: &rejected, state: &state, log: &log)
            }
            guard info.st_nlink == 1 else {
                return putAside(
                    "a file with \(info.st_nlink) hard links (another name for it exists)", rejected: &rejected, state: &state, log: &log)
            }
            guard Int64(info.st_size) <= Int64(owner.maxFileBytes) else {
                return putAside(
                    "\(info.st_size) bytes, more than telemetry.spoolMaxFileBytes (\(owner.maxFileBytes))", rejected: &rejected,
                    state: &state, log: &log)
            }
            readLines(
                fd, info: info, resume: resume, batcher: &batcher, filling: &filling, stamp: stamp, enqueue: enqueue, rejected: &rejected,
                state: &state, log: &log)
        }

        /// A file's refused lines: kept in `rejected/<name>` a bufferful at a time, each kept once.
        private struct Refusals {
            /// Refused lines of the file kept so far (earlier passes included).
            var count: Int
            /// Refused lines ending at or before this offset are kept already.
            var through: Int64
            /// Kept lines not yet written, and where the last of them ends.
            var text = ""
            var textThrough: Int64 = 0
            /// Lines refused in this pass, and the first of them (`line N: reason`).
            var new = 0
            var first: String?
        }

        private mutating func readLines(
            _ fd: Int32, info: stat, resume: SpoolProgress?, batcher: inout Batcher, filling: inout Filling, stamp: () -> Int64,
            enqueue: (Batch) -> Bool, rejected: inout RejectedDirectory, state: inout State, log: inout PassLog
        ) {
            // Never read past the size judged: bytes a writer adds after the open are not taken.
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
            var refusals = Refusals(count: resumed?.refusedLines ?? 0, through: resumed?.refusedThrough ?? 0)
            var stamped = false
            // Where the last line handed out ends, and its number: a batch completed by a line
            // holds the lines before it.
            var lineEnd = splitter.offset
            var lineNumber = splitter.lineNumber
            var batchStart = (offset: splitter.offset, line: splitter.lineNumber)

            /// Records that the lines before `offset` are queued and the refused ones up to
            /// `refusals.through` kept.
            func record(_ offset: Int64, _ number: Int) -> Bool {
                let progress = SpoolProgress(
                    name: name, device: device, inode: inode, size: size, modified: modified, offset: offset, lineNumber: number,
                    stamp: fileStamp, refusedThrough: refusals.through, refusedLines: refusals.count)
                let saved = owner.writeProgress(progress, state: &state)
                if saved { recorded = true }
                return saved
            }
            /// Writes the refused lines waiting, then records that they are kept.
            func keepRefused() {
                guard writeRefused() else { return }
                _ = record(batchStart.offset, batchStart.line)
            }
            /// Writes the refused lines waiting to `rejected/<name>`; false when none were.
            func writeRefused() -> Bool {
                guard !refusals.text.isEmpty else { return false }
                rejected.append(refusals.text, to: name)
                refusals.text = ""
                refusals.through = max(refusals.through, refusals.textThrough)
                return true
            }
            /// A line refused: kept unless an earlier pass kept it; false at the one past the bound.
            func refuse(_ text: String, _ reason: String, number: Int, end: Int64) -> Bool {
                guard end > refusals.through else { return true }  // kept before a kill: not twice
                guard refusals.count < SpoolDirectory.maxRefusedLinesPerFile else { return false }
                refusals.count += 1
                refusals.new += 1
                if refusals.first == nil { refusals.first = "line \(number): \(reason)" }
                refusals.text += "# \(name):\(number): \(reason)\n\(text)\n"
                refusals.textThrough = end
                if refusals.text.utf8.count >= SpoolDirectory.rejectedFlushBytes { keepRefused() }
                return true
            }
            /// Queues one batch of this file's lines, which runs to `end`; records progress.
            func queue(_ batch: Batch, upTo end: Int64, line: Int, more: Bool) -> Bool {
                // Lines stamped now must be stamped the same if this batch is queued again.
                if stamped && !recorded {
                    guard record(batchStart.offset, batchStart.line) else { return false }
                }
                guard enqueue(batch) else { return false }
                // The batch may open with the collectors' points: they are not spool lines.
                queuedLines += batch.lines.count - filling.memoryLines
                owner.removeCarried(&filling, directory: directory)
                batchStart = (end, line)
                _ = writeRefused()
                if more || refusals.new > 0 { _ = record(end, line) }
                return true
            }

            /// The batch the queue refused, if one was.
            var unqueued: Batch?
            var capped = false
            var buffer = [UInt8](repeating: 0, count: SpoolDirectory.readBufferBytes)
            reading: while splitter.offset < size {
                if let deadline, Instant.now() >= deadline {
                    yielded = true
                    break
                }
                let want = Int(min(Int64(buffer.count), size - splitter.offset))
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, want) }
                if count < 0 && errno == EINTR { continue }
                if count < 0 {
                    log.note(
                        owner.logger, .warning, "spool file cannot be read",
                        ["file": "\(name)", "reason": "\(errnoMessage(errno))"])
                    owner.abandon(&filling, batcher: &batcher)
                    return
                }
                if count == 0 { break }  // shorter than judged (truncated meanwhile): what was there
                let going = buffer.withUnsafeBytes { raw in
                    splitter.feed(UnsafeRawBufferPointer(rebasing: raw[..<count])) { line in
                        switch SpoolLineVerdict.judge(line, timestamp: fileStamp, device: owner.device) {
                        case .skip: break
                        case .refused(let text, let reason):
                            guard refuse(text, reason, number: line.number, end: line.end) else {
                                capped = true
                                return false
                            }
                        case .point(let point, let wasStamped):
                            let completed: Batch?
                            do throws(Batcher.LineTooLong) {
                                completed = try batcher.add(point)
                            } catch {
                                guard refuse(point, error.description, number: line.number, end: line.end) else {
                                    capped = true
                                    return false
                                }
                                completed = nil
                            }
                            if let completed {
                                guard queue(completed, upTo: lineEnd, line: lineNumber, more: true) else {
                                    blocked = true
                                    unqueued = completed
                                    return false
                                }
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
            if capped || yielded {
                // Stopped inside the file: what is read so far is queued and recorded.
                if let rest = batcher.flush() {
                    guard queue(rest, upTo: lineEnd, line: lineNumber, more: true) else {
                        blocked = true
                        yielded = false
                        owner.abandon(&filling, batcher: &batcher, unqueued: rest)
                        return
                    }
                } else if lineEnd > batchStart.offset || !refusals.text.isEmpty {
                    batchStart = (lineEnd, lineNumber)
                    if refusals.text.isEmpty { _ = record(lineEnd, lineNumber) } else { keepRefused() }
                }
                if capped {
                    rejectedLines += refusals.new
                    setAsideWhole(
                        "more than \(SpoolDirectory.maxRefusedLinesPerFile) refused lines (the first: \(refusals.first ?? "before a restart"))",
                        at: lineNumber, rejected: &rejected, state: &state, log: &log)
                } else {
                    rejectedLines += refusals.new
                    logRefusals(refusals, log: &log, outcome: "the rest is taken at the next sync")
                }
                return
            }
            if let last = splitter.finish(), case .refused(let text, let reason) = SpoolLineVerdict.judge(last, timestamp: nil) {
                _ = refuse(text, reason, number: last.number, end: last.end)
            }
            rejectedLines += refusals.new
            var now = stat()
            let grew = fstat(fd, &now) == 0 && Int64(now.st_size) > size
            // A file read whole, whose lines carry their own times and are all waiting in the
            // batch: the next file fills the batch further, and this one goes once it is queued.
            // (Lines the agent stamped end their batch here: their time is recorded for it.)
            if resumed == nil, !stamped, !recorded, !grew, refusals.count == 0, batcher.pending.points > filling.memoryLines {
                filling.carried.append(name)
                return
            }
            if let rest = batcher.flush() {
                guard queue(rest, upTo: size, line: splitter.lineNumber, more: grew) else {
                    blocked = true
                    owner.abandon(&filling, batcher: &batcher, unqueued: rest)
                    return
                }
            }
            keepRefused()
            if grew {
                setAsideWhole(
                    "grew from \(size) to \(now.st_size) bytes while being read (a writer must rename a finished file in)",
                    at: splitter.lineNumber, rejected: &rejected, state: &state, log: &log)
                return
            }
            // All of it is queued: the file goes, then its record (a record for a file that is
            // gone is dropped at the next pass).
            if name.withCString({ unlinkat(directory, $0, 0) }) != 0 {
                log.note(
                    owner.logger, .error, "spool file queued but not removed", ["file": "\(name)", "reason": "\(errnoMessage(errno))"])
            }
            if recorded { owner.clearProgress(state: &state) }
            logRefusals(refusals, log: &log, outcome: "the file is removed: its other lines are queued")
        }

        /// One log line for the file's refused lines, if it had any this pass.
        private func logRefusals(_ refusals: Refusals, log: inout PassLog, outcome: String) {
            guard refusals.new > 0 else { return }
            log.note(
                owner.logger, .warning, "spool file has refused lines",
                [
                    "file": "\(name)", "refused": "\(refusals.new)", "first": "\(refusals.first ?? "")",
                    "kept": "\(owner.path)/\(SpoolDirectory.rejectedName)/\(name)", "outcome": "\(outcome)",
                ])
        }

        /// Moves the file, read up to `line`, into `rejected/` whole (its queued lines stay queued).
        private mutating func setAsideWhole(
            _ reason: String, at line: Int, rejected: inout RejectedDirectory, state: inout State, log: inout PassLog
        ) {
            switch rejected.moveIn(name) {
            case .success(let now):
                setAside = true
                owner.clearProgress(state: &state)
                log.note(
                    owner.logger, .error, "spool file set aside whole",
                    [
                        "file": "\(name)", "reason": "\(reason)", "queued": "the lines before line \(line + 1)",
                        "now": "\(owner.path)/\(now)",
                    ])
            case .failure(let problem):
                owner.skipForGood(name, state: &state)
                log.note(
                    owner.logger, .error, "spool file neither taken nor set aside: skipped until the agent restarts",
                    ["file": "\(name)", "reason": "\(reason)", "problem": "\(problem)"])
            }
        }

        private mutating func putAside(_ reason: String, rejected: inout RejectedDirectory, state: inout State, log: inout PassLog) {
            switch rejected.moveIn(name) {
            case .success(let now):
                rejectedLines += 1
                setAside = true
                log.note(
                    owner.logger, .error, "spool entry set aside, not read",
                    ["file": "\(name)", "reason": "\(reason)", "now": "\(owner.path)/\(now)"])
            case .failure(let problem):
                owner.skipForGood(name, state: &state)
                log.note(
                    owner.logger, .error, "spool entry neither read nor set aside: skipped until the agent restarts",
                    ["file": "\(name)", "reason": "\(reason)", "problem": "\(problem)"])
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
}

/// The log of one pass: one line per file up to `limit`, then one line for all the others.
private struct PassLog {
    enum Level { case warning, error }
    let limit: Int
    private(set) var logged = 0
    private(set) var unlogged = 0

    init(limit: Int) { self.limit = limit }

    mutating func note(_ logger: Logger, _ level: Level, _ message: String, _ metadata: Logger.Metadata) {
        guard logged < limit else {
            unlogged += 1
            return
        }
        logged += 1
        switch level {
        case .warning: logger.warning(message, metadata: metadata)
        case .error: logger.error(message, metadata: metadata)
        }
    }

    func finish(_ logger: Logger, directory: String) {
        guard unlogged > 0 else { return }
        logger.warning(
            "spool: more files refused or set aside in this sync than are logged one by one",
            metadata: ["directory": "\(directory)", "notLogged": "\(unlogged)", "logged": "\(logged)"])
    }
}

/// The spool's `rejected/`, reached through a descriptor, used only while it is the agent's own.
private struct RejectedDirectory {
    let spool: Int32
    private var fd: Int32 = -1
    private(set) var problem: String?
    /// Whether an entry was moved in, or refused lines written, in this pass.
    private(set) var movedIn = false
    private(set) var appended = false

    init(spool: Int32) { self.spool = spool }

    struct Problem: Error, CustomStringConvertible { let description: String }

    /// `rejected/`'s descriptor; created first when `create` (nothing is made just to be trimmed).
    private mutating func descriptor(create: Bool = true) -> Int32? {
        if fd >= 0 { return fd }
        if problem != nil { return nil }
        if !create {
            var info = stat()
            guard fstatat(spool, SpoolDirectory.rejectedName, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        }
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
    mutating func moveIn(_ name: SpoolName) -> Result<String, Problem> {
        guard let fd = descriptor() else { return .failure(Problem(description: problem ?? "")) }
        for attempt in 0..<100 {
            let target = attempt == 0 ? name : name.appending(".\(attempt)")
            let moved = name.withCString { from in target.withCString { to in tinyfire_renameat_noreplace(spool, from, fd, to) } }
            if moved == 0 {
                movedIn = true
                return .success("\(SpoolDirectory.rejectedName)/\(target)")
            }
            if errno != EEXIST { return .failure(Problem(description: errnoMessage(errno))) }
        }
        return .failure(Problem(description: "\(name) … \(name).99 are all taken in rejected/"))
    }

    /// Appends refused lines to `name`: only to a regular file of the agent's with one link.
    mutating func append(_ text: String, to name: SpoolName) {
        guard let directory = descriptor() else { return }
        let file = name.withCString { openat(directory, $0, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o640) }
        guard file >= 0 else { return }
        defer { closeDescriptor(file) }
        var info = stat()
        guard fstat(file, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), info.st_nlink == 1, info.st_uid == geteuid() else {
            return
        }
        if writeAll(file, Array(text.utf8)) == nil { appended = true }
    }

    /// Keeps the directory within `maxBytes` on disk and `maxEntries` entries: an entry larger
    /// than `maxBytes` alone goes first, then the oldest (by change time, which a rename sets
    /// and nobody can set back). A directory set aside is removed only when empty (nothing is removed inside it).
    /// - Returns: how many entries were removed and the bytes they held.
    mutating func trim(maxBytes: Int, maxEntries: Int) -> (dropped: Int, bytes: Int64) {
        guard let fd = descriptor(create: false) else { return (0, 0) }
        let copy = dup(fd)
        guard copy >= 0, let stream = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return (0, 0)
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var entries: [(name: SpoolName, bytes: Int64, changed: Int64, directory: Bool)] = []
        var total: Int64 = 0
        _ = readDirectoryNameBytes(stream) { bytes in
            let name = SpoolName(bytes: bytes)
            var info = stat()
            guard name.withCString({ fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return }
            let size = Int64(info.st_blocks) * 512
            total += size
            let changed = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
            entries.append((name, size, changed, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR)))
        }
        guard total > Int64(maxBytes) || entries.count > maxEntries else { return (0, 0) }
        // An entry larger than the whole bound could never be kept: it goes first.
        let limit = Int64(maxBytes)
        entries.sort { ($0.bytes > limit ? 0 : 1, $0.changed) < ($1.bytes > limit ? 0 : 1, $1.changed) }
        var count = entries.count
        var dropped = 0
        var freed: Int64 = 0
        for entry in entries {
            guard total > Int64(maxBytes) || count > maxEntries else { break }
            let flags = entry.directory ? AT_REMOVEDIR : 0
            guard entry.name.withCString({ unlinkat(fd, $0, flags) }) == 0 else { continue }
            total -= entry.bytes
            freed += entry.bytes
            count -= 1
            dropped += 1
        }
        return (dropped, freed)
    }

    mutating func release() {
        if fd >= 0 { closeDescriptor(fd) }
        fd = -1
    }
}
