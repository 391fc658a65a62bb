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
    package static func privateDirectoryProblem(_ path: String) -> String? {
        var current = path.hasPrefix("/") ? path : (currentDirectory() + "/" + path)
        var first = true
        while !current.isEmpty {
            var info = stat()
            if stat(current, &info) == 0 {
                guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR) else { return "\(current) is not a directory" }
                if !ownedByAgentOrRoot(info) { return ownerProblem(current, info) }
                if info.st_mode & 0o022 != 0 {
                    if first {
                        return "\(current) is writable by group or others (mode \(mode(info))): another user could change the "
                            + "agent's state there; run chmod go-w on it"
                    }
                    if info.st_mode & mode_t(S_ISVTX) == 0 {
                        return "\(current), above \(path), is writable by group or others without the sticky bit "
                            + "(mode \(mode(info))): another user could replace what is below it"
                    }
                }
            } else if errno != ENOENT {
                return "\(current) cannot be examined: \(errnoMessage(errno))"
            }
            first = false
            if current == "/" { break }
            let parent = current.lastIndex(of: "/").map { String(current[..<$0]) } ?? ""
            current = parent.isEmpty ? "/" : parent
        }
        return nil
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
