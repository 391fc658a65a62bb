import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The firmware flow's files in `firmware.directory`:
///
/// - `state.json`: `FirmwareState`, replaced durably (temporary file, fsync, rename, fsync of
///   the directory) before each step, so a kill or a power cut at any moment leaves the old
///   state or the new one, never a torn one;
/// - `offers/DIGEST.json` and `offers/DIGEST.json.sig`: manifests exactly as signed, kept from
///   the poll that fetched them until no update follows them (verified again after a restart;
///   a newer offer never overwrites the one an update under way follows);
/// - `staging/`: the image (`image.part` while it downloads, `image.bin` once verified: the
///   same file system, so the move is a rename) and the download's resume record.
package struct FirmwareStore: Sendable {
    /// The directory.
    package let directory: String

    /// The store in `directory` (created 0700 when missing).
    /// - Throws: `AgentError` when it cannot be created.
    package init(directory: String) throws(AgentError) {
        self.directory = directory
        makeDirectories(directory, mode: 0o700)
        for path in [directory, directory + "/staging", directory + "/offers"] {
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                throw AgentError(description: "firmware.directory \(path): cannot be created: \(errnoMessage(errno))")
            }
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR) else {
                throw AgentError(description: "firmware.directory \(path): cannot be created: \(errnoMessage(ENOTDIR))")
            }
        }
    }

    package var statePath: String { directory + "/state.json" }
    /// The image while it downloads.
    package var partialImagePath: String { directory + "/staging/image.part" }
    /// The image once verified: what the installer gets.
    package var imagePath: String { directory + "/staging/image.bin" }
    /// Held (flock) by the installer for as long as it runs, through an inherited descriptor.
    package var installLockPath: String { directory + "/install.lock" }
    /// The download's resume record (validators of the partial image).
    package var resumeRecordPath: String { directory + "/staging/image.resume" }

    /// Reads the state; a missing file is a fresh state.
    /// - Throws: `AgentError` naming the file when it is unreadable or not a state document
    ///   (the caller moves it aside and starts afresh; see `quarantineState`).
    package func loadState() throws(AgentError) -> FirmwareState {
        guard let bytes = SystemFiles().readBytes(statePath, limit: 1 << 20, whole: true) else {
            if access(statePath, F_OK) != 0 { return FirmwareState() }
            throw AgentError(description: "firmware state \(statePath) cannot be read: \(errnoMessage(errno))")
        }
        let json: JSONValue
        do throws(ConfigError) {
            json = try JSONValue.parse(bytes, file: statePath)
        } catch {
            throw AgentError(description: "firmware state \(statePath) is damaged: \(error.description)")
        }
        do throws(AgentError) {
            return try FirmwareState(json: json)
        } catch {
            throw AgentError(description: "firmware state \(statePath) is damaged: \(error.description)")
        }
    }

    /// Moves a damaged state file aside (`state.json.damaged`) so the agent can start.
    package func quarantineState() {
        rename(statePath, statePath + ".damaged")
    }

    /// Replaces the state durably.
    /// - Throws: `AgentError` naming the file (disk full, read-only).
    package func save(_ state: FirmwareState) throws(AgentError) {
        try writeDurably(Array((state.json.text + "\n").utf8), to: statePath)
    }

    /// Keeps a manifest and its signature under the manifest's digest.
    package func saveManifest(_ manifest: [UInt8], signature: [UInt8], digest: String) throws(AgentError) {
        let path = directory + "/offers/" + digest + ".json"
        try writeDurably(signature, to: path + ".sig")
        try writeDurably(manifest, to: path)
    }

    /// The manifest and signature kept for `digest`, if both are there.
    package func loadManifest(digest: String) -> (manifest: [UInt8], signature: [UInt8])? {
        let path = directory + "/offers/" + digest + ".json"
        guard let manifest = SystemFiles().readBytes(path, limit: FirmwareManifest.maximumBytes, whole: true),
            let signature = SystemFiles().readBytes(path + ".sig", limit: ManifestSignature.maximumBytes, whole: true)
        else { return nil }
        return (manifest, signature)
    }

    /// Removes kept manifests other than `digest`'s.
    package func forgetManifests(except digest: String?) {
        for name in SystemFiles().list(directory + "/offers") where digest.map({ !name.hasPrefix($0 + ".json") }) ?? true {
            unlink(directory + "/offers/" + name)
        }
    }

    /// Opens and locks the install lock for an installer to inherit: first exclusively (no
    /// other installer may run), then shared, so that an installer that runs in a unit of its own
    /// (`etc/fire-agent-firmware@.service`, which takes the same lock shared with
    /// `flock --shared`) holds it too, and a restarted agent still sees it running after the
    /// command that started it is gone.
    /// - Returns: the descriptor (the caller closes it once the installer ended), or nil.
    package func lockForInstaller() -> Int32? {
        let fd = open(installLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return nil }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0, flock(fd, LOCK_SH | LOCK_NB) == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Takes the firmware flow's lock (`agent.lock`, flock): one fire-agent at a time — the
    /// daemon or a one-shot `firmware update --once` — acts on this directory. The file holds
    /// the holder's PID, for the message the others get.
    /// - Returns: the descriptor, held for as long as the flow runs (closing it releases it).
    /// - Throws: `AgentError` naming the process that holds it.
    package func lockFlow() throws(AgentError) -> Int32 {
        let path = directory + "/agent.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw AgentError(description: "\(path): cannot be opened: \(errnoMessage(errno))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = SystemFiles().read(path, limit: 32)?.trimmed() ?? ""
            close(fd)
            throw AgentError(
                description: "another fire-agent\(holder.isEmpty ? "" : " (PID \(holder))") runs the firmware flow on \(directory)",
                isBusy: true)
        }
        _ = ftruncate(fd, 0)
        _ = writeAll(fd, Array("\(getpid())\n".utf8))
        return fd
    }

    /// Waits while an installer started by an earlier agent still holds the install lock
    /// (exclusively or shared).
    /// - Parameter timeout: how long to wait at most.
    /// - Returns: true when no installer holds it (any more).
    package func waitForInstaller(timeout: Duration) -> Bool {
        let fd = open(installLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return true }
        defer { close(fd) }
        let deadline = Instant.now() + timeout
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if Instant.now() >= deadline { return false }
            usleep(100_000)
        }
        flock(fd, LOCK_UN)
        return true
    }

    /// Removes the staged image (partial or verified) and its resume record.
    package func discardImage() {
        for path in [partialImagePath, imagePath, resumeRecordPath] { unlink(path) }
    }

    /// Writes `bytes` to `path` durably (`replaceFile`: a power cut leaves the old file or the
    /// whole new one).
    private func writeDurably(_ bytes: [UInt8], to path: String) throws(AgentError) {
        if let failure = replaceFile(path, with: bytes, durability: .durable) {
            throw AgentError(description: "\(path) not written: \(failure.description)")
        }
    }
}

extension FirmwareState {
    /// The state as the JSON `state.json` holds.
    package var json: StatusJSON {
        let entries = history.map { entry -> StatusJSON in
            .object([("digest", .string(entry.digest)), ("version", .string(entry.version)), ("installerRan", .bool(entry.installerRan))])
        }
        // `finished` and `installerRuns` are what agents before `history` read (32 each): an
        // agent rolled back to one keeps the newest of what it knew.
        let legacyFinished = (refused + history.map { $0.digest }).suffix(32)
        let legacyRuns = history.filter { $0.installerRan }.map { $0.digest }.suffix(32)
        var members: [(String, StatusJSON)] = [
            ("history", .array(entries)), ("refused", .array(refused.map(StatusJSON.string))),
            ("finished", .array(legacyFinished.map(StatusJSON.string))), ("installerRuns", .array(legacyRuns.map(StatusJSON.string))),
            ("highestAccepted", highestAccepted.map(StatusJSON.string) ?? .null),
        ]
        if let update {
            var record: [(String, StatusJSON)] = [
                ("phase", .string(update.phase.rawValue)), ("manifestDigest", .string(update.manifestDigest)),
                ("version", .string(update.version)), ("size", .integer(update.size)),
                ("freshDownloads", .integer(Int64(update.freshDownloads))), ("failedAttempts", .integer(Int64(update.failedAttempts))),
                ("since", .number(Double(update.since.millisecondsSince1970) / 1000)),
            ]
            if let value = update.fromVersion { record.append(("fromVersion", .string(value))) }
            if let value = update.bootID { record.append(("bootID", .string(value))) }
            if let value = update.reason { record.append(("reason", .string(value))) }
            if update.phase == .confirming || update.phase == .rollingBack {
                record.append(("healthy", .bool(update.healthy)))
                record.append(("healthAttempts", .integer(Int64(update.healthAttempts))))
                record.append(("confirmElapsedMilliseconds", .integer(update.confirmElapsedMilliseconds)))
                if let mark = update.confirmMark {
                    record.append(
                        (
                            "confirmMark",
                            .object([("bootID", .string(mark.bootID)), ("uptimeMilliseconds", .integer(mark.uptimeMilliseconds))])
                        ))
                }
                record.append(("rollbackRan", .bool(update.rollbackRan)))
                if let value = update.rollbackBootID { record.append(("rollbackBootID", .string(value))) }
            }
            members.append(("update", .object(record)))
        }
        return .object(members)
    }

    /// Reads the JSON `json` wrote.
    /// - Throws: `AgentError` naming the first member that is wrong.
    package init(json: JSONValue) throws(AgentError) {
        func fail(_ what: String) -> AgentError { AgentError(description: what) }
        guard case .object(let root) = json else { throw fail("not an object") }
        func strings(_ value: JSONValue?, _ name: String) throws(AgentError) -> [String] {
            guard case .array(let items)? = value else { throw fail("\(name) is not an array") }
            var out: [String] = []
            for item in items {
                guard case .string(let text) = item else { throw fail("\(name) holds a non-string") }
                out.append(text)
            }
            return out
        }
        self.init()
        if let value = root["history"] {
            guard case .array(let items) = value else { throw fail("history is not an array") }
            for item in items {
                guard case .object(let entry) = item, case .string(let digest)? = entry["digest"],
                    case .string(let version)? = entry["version"], case .bool(let ran)? = entry["installerRan"]
                else { throw fail("history holds an entry without digest, version and installerRan") }
                history.append(HistoryEntry(digest: digest, version: version, installerRan: ran))
            }
            refused = try strings(root["refused"], "refused")
        } else {
            // Written by an agent before `history`: what it remembered stays remembered, with
            // versions unknown (never dropped), refusals included.
            let finished = try strings(root["finished"], "finished")
            let runs = try strings(root["installerRuns"], "installerRuns")
            for digest in finished + runs where !history.contains(where: { $0.digest == digest }) {
                history.append(HistoryEntry(digest: digest, version: "", installerRan: runs.contains(digest)))
            }
        }
        if case .string(let text)? = root["highestAccepted"] { highestAccepted = text }
        guard let value = root["update"] else { return }
        guard case .object(let record) = value else { throw fail("update is not an object") }
        func text(_ key: String) throws(AgentError) -> String {
            guard case .string(let value)? = record[key] else { throw fail("update.\(key) is missing") }
            return value
        }
        func number(_ key: String) throws(AgentError) -> Double {
            guard case .number(let value)? = record[key], value.isFinite else { throw fail("update.\(key) is missing") }
            return value
        }
        guard let phase = UpdatePhase(rawValue: try text("phase")) else { throw fail("update.phase is not a phase") }
        var update = UpdateRecord(
            phase: phase, manifestDigest: try text("manifestDigest"), version: try text("version"), fromVersion: nil,
            size: Int64(clamping: Int64(exactly: (try number("size")).rounded()) ?? 0),
            since: WallTime(millisecondsSince1970: Int64(exactly: (try number("since") * 1000).rounded()) ?? 0))
        update.freshDownloads = Int(clamping: Int64(exactly: (try number("freshDownloads")).rounded()) ?? 0)
        update.failedAttempts = Int(clamping: Int64(exactly: (try number("failedAttempts")).rounded()) ?? 0)
        if case .string(let value)? = record["fromVersion"] { update.fromVersion = value }
        if case .string(let value)? = record["bootID"] { update.bootID = value }
        if case .string(let value)? = record["reason"] { update.reason = value }
        func integer(_ key: String) -> Int64 {
            guard case .number(let value)? = record[key], value.isFinite else { return 0 }
            return Int64(exactly: value.rounded()) ?? 0
        }
        // Written by agents with a health gate; an older agent's `confirming` has none of them
        // and is confirmed as it would have been (a check configured since runs now).
        if case .bool(let value)? = record["healthy"] { update.healthy = value }
        update.healthAttempts = Int(clamping: integer("healthAttempts"))
        update.confirmElapsedMilliseconds = max(0, integer("confirmElapsedMilliseconds"))
        if case .object(let mark)? = record["confirmMark"], case .string(let boot)? = mark["bootID"],
            case .number(let uptime)? = mark["uptimeMilliseconds"], uptime.isFinite
        {
            update.confirmMark = ConfirmMark(bootID: boot, uptimeMilliseconds: Int64(exactly: uptime.rounded()) ?? 0)
        }
        if case .bool(let value)? = record["rollbackRan"] { update.rollbackRan = value }
        if case .string(let value)? = record["rollbackBootID"] { update.rollbackBootID = value }
        self.update = update
    }
}
