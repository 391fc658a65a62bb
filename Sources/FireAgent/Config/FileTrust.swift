import TinyFireCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Who may change or read the files and directories the agent trusts. The agent runs as root
/// (or its own user); a file another user can write decides what the agent trusts, and a secret
/// another user can read is no longer one. Each check returns the problem in words, or nil.
package enum FileTrust {
    /// The owner is the agent's user or root.
    private static func ownedByAgentOrRoot(_ info: stat) -> Bool {
        info.st_uid == geteuid() || info.st_uid == 0
    }

    private static func mode(_ info: stat) -> String {
        let digits = String(info.st_mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    private static func ownerProblem(_ file: String, _ info: stat) -> String {
        "\(file) is owned by uid \(info.st_uid), not by the agent's user (uid \(geteuid())) or root: chown it"
    }

    /// A secret (a private key, a config holding a password or token): owned by the agent's
    /// user or root, neither readable nor writable by group or others.
    package static func secretProblem(_ file: String) -> String? {
        var info = stat()
        guard stat(file, &info) == 0 else { return "\(file) cannot be read: \(errnoMessage(errno))" }
        if !ownedByAgentOrRoot(info) { return ownerProblem(file, info) }
        if info.st_mode & 0o077 != 0 {
            return "\(file) is readable or writable by group or others (mode \(mode(info))): run chmod 600 on it"
        }
        return nil
    }

    /// A file whose content the agent trusts (a key updates are checked against): owned by the
    /// agent's user or root, not writable by group or others. nil also when it cannot be
    /// examined (whoever reads it reports that).
    package static func trustedFileProblem(_ file: String) -> String? {
        var info = stat()
        guard stat(file, &info) == 0 else { return nil }  // reading it says why it cannot be read
        if !ownedByAgentOrRoot(info) { return ownerProblem(file, info) }
        if info.st_mode & 0o022 != 0 {
            return "\(file) is writable by group or others (mode \(mode(info))): whoever can write it decides what is trusted; "
                + "run chmod go-w on it"
        }
        return nil
    }

    /// A directory of the agent's own state (queue, dead letters, firmware staging, status):
    /// it, and every directory above it, owned by the agent's user or root; it not writable by
    /// group or others; those above it writable by group or others only with the sticky bit (so
    /// nobody else can rename it away and put another in its place). A part of the path that
    /// does not exist yet is created by the agent; the check covers what exists.
    ///
    /// The path is followed as the kernel follows it: every directory it passes through is
    /// judged, those a symbolic link leads to and those holding a link (so a link into a
    /// directory another user controls is that user's path, wherever the link itself stands).
    package static func privateDirectoryProblem(_ path: String) -> String? {
        let absolute = path.hasPrefix("/") ? path : (currentDirectory() + "/" + path)
        var walk = PathWalk()
        if let problem = walk.follow(absolute) { return problem }
        let through = walk.firstLink.map { " (\(path) leads there through the symbolic link \($0))" } ?? ""
        // The deepest first: the directory itself when it exists, then those above it.
        for (index, directory) in walk.directories.enumerated().reversed() {
            let info = directory.info
            if !ownedByAgentOrRoot(info) { return ownerProblem(directory.path, info) + through }
            guard info.st_mode & 0o022 != 0 else { continue }
            if walk.reachedEnd && index == walk.directories.count - 1 {
                return "\(directory.path) is writable by group or others (mode \(mode(info))): another user could change the "
                    + "agent's state there; run chmod go-w on it" + through
            }
            if info.st_mode & mode_t(S_ISVTX) == 0 {
                return "\(directory.path), above \(path), is writable by group or others without the sticky bit "
                    + "(mode \(mode(info))): another user could replace what is below it" + through
            }
        }
        return nil
    }

    /// A path resolved one component at a time with `lstat`, symbolic links followed as the
    /// kernel follows them (at most 40), each directory passed through kept with its `stat`.
    private struct PathWalk {
        /// Every directory passed through, in order: `/` first, the path's own directory last
        /// when `reachedEnd`.
        var directories: [(path: String, info: stat)] = []
        /// Every component existed (else the walk stopped at the first that does not).
        var reachedEnd = false
        /// The first symbolic link followed, for the message.
        var firstLink: String?

        /// Walks `absolute`; the problem that stops it (not a directory, a loop, an error other
        /// than a missing component), or nil.
        mutating func follow(_ absolute: String) -> String? {
            var current = "/"
            var root = stat()
            guard stat("/", &root) == 0 else { return "/ cannot be examined: \(errnoMessage(errno))" }
            directories.append(("/", root))
            // The components still to walk, the next one last.
            var pending = Array(Self.components(absolute).reversed())
            var links = 0
            while let name = pending.popLast() {
                if name == "." { continue }
                if name == ".." {
                    current = Self.parent(of: current)
                    continue
                }
                let next = current == "/" ? "/" + name : current + "/" + name
                var info = stat()
                guard lstat(next, &info) == 0 else {
                    if errno == ENOENT { return nil }
                    return "\(next) cannot be examined: \(errnoMessage(errno))"
                }
                if info.st_mode & mode_t(S_IFMT) == mode_t(S_IFLNK) {
                    links += 1
                    guard links <= 40, let target = Self.linkTarget(next) else {
                        return links > 40
                            ? "\(absolute) cannot be examined: too many symbolic links"
                            : "\(next) cannot be examined: \(errnoMessage(errno))"
                    }
                    if firstLink == nil { firstLink = next }
                    if target.hasPrefix("/") { current = "/" }
                    pending.append(contentsOf: Self.components(target).reversed())
                    continue
                }
                guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR) else { return "\(next) is not a directory" }
                current = next
                directories.append((next, info))
            }
            reachedEnd = true
            return nil
        }

        private static func components(_ path: String) -> [Substring] {
            path.split(separator: "/")
        }

        private static func parent(of path: String) -> String {
            guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
            return String(path[..<slash])
        }

        private static func linkTarget(_ path: String) -> String? {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink(path, &buffer, buffer.count - 1)
            guard length > 0 else { return nil }
            return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    private static func currentDirectory() -> String {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let found = buffer.withUnsafeMutableBufferPointer { raw in
            raw.withMemoryRebound(to: CChar.self) { getcwd($0.baseAddress, $0.count) != nil }
        }
        guard found else { return "." }
        return String(decoding: buffer.prefix(while: { $0 != 0 }), as: UTF8.self)
    }
}
