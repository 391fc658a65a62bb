import Foundation
import Testing

/// fire-agent's Debian package and the files it installs, checked with the tools a board runs
/// them with: systemd-sysusers, systemd-tmpfiles, dpkg-deb. (board/test.py installs the package
/// on the emulated board; these catch a broken file before a board is booted.)
@Suite("the Debian package and its sysusers.d, tmpfiles.d and D-Bus files", .serialized)
struct PackageTests {
    static let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func scratch(_ name: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appending(path: "tinyfire-package-\(name)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: path + "/etc", withIntermediateDirectories: true)
        return path
    }

    @Test("systemd-sysusers makes the fire-agent user (no login) and the fire-spool group, with the agent in it")
    func sysusers() throws {
        let sysroot = try Self.scratch("sysusers")
        defer { try? FileManager.default.removeItem(atPath: sysroot) }
        let tool = try #require(which("systemd-sysusers"), "systemd-sysusers is missing (scripts/install-deps.sh installs systemd)")
        let result = try runCapturingOutput(tool, ["--root=\(sysroot)", Self.root.appending(path: "etc/fire-agent.sysusers").path])
        #expect(result.status == 0, "\(result.stderr)")
        let passwd = try String(contentsOfFile: sysroot + "/etc/passwd", encoding: .utf8)
        let group = try String(contentsOfFile: sysroot + "/etc/group", encoding: .utf8)
        let agent = try #require(passwd.split(separator: "\n").first { $0.hasPrefix("fire-agent:") }, "\(passwd)")
        #expect(agent.hasSuffix(":/var/lib/fire-agent:/usr/sbin/nologin"), "\(agent)")
        let uid = Int(agent.split(separator: ":")[2]) ?? 0
        #expect(uid > 0 && uid < 1000, "a system user, not root: \(agent)")
        let spool = try #require(group.split(separator: "\n").first { $0.hasPrefix("fire-spool:") }, "\(group)")
        #expect(spool.hasSuffix(":fire-agent"), "the agent reads the writers' files through the group: \(spool)")
    }

    @Test("systemd-tmpfiles makes the spool 3770 fire-agent:fire-spool (setgid, sticky)")
    func tmpfiles() throws {
        let sysroot = try Self.scratch("tmpfiles")
        defer { try? FileManager.default.removeItem(atPath: sysroot) }
        let sysusers = try #require(which("systemd-sysusers"))
        _ = try runCapturingOutput(sysusers, ["--root=\(sysroot)", Self.root.appending(path: "etc/fire-agent.sysusers").path])
        let tool = try #require(which("systemd-tmpfiles"))
        let result = try runCapturingOutput(
            tool, ["--root=\(sysroot)", "--create", Self.root.appending(path: "etc/fire-agent.tmpfiles").path])
        #expect(result.status == 0, "\(result.stderr)")
        var info = stat()
        #expect(stat(sysroot + "/var/spool/fire-agent", &info) == 0)
        #expect(info.st_mode & 0o7777 == 0o3770, "mode \(String(info.st_mode & 0o7777, radix: 8))")
        let passwd = try String(contentsOfFile: sysroot + "/etc/passwd", encoding: .utf8)
        let uid = passwd.split(separator: "\n").first { $0.hasPrefix("fire-agent:") }.flatMap { UInt32($0.split(separator: ":")[2]) }
        #expect(uid != nil && info.st_uid == uid!, "owner \(info.st_uid)")
    }

    @Test(
        "packaging/build-deb.sh: the binary, the units, the user, the spool, the D-Bus policy, the polkit rule, and the config as a 0600 conffile"
    )
    func debianPackage() throws {
        let work = try Self.scratch("deb")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = work + "/fire-agent"
        try Data("#!/bin/sh\necho fire-agent\n".utf8).write(to: URL(filePath: binary))
        chmod(binary, 0o755)
        let build = try runCapturingOutput(
            "/bin/bash", [Self.root.appending(path: "packaging/build-deb.sh").path, "arm64", binary, work + "/out"])
        #expect(build.status == 0, "\(build.stderr)")
        let deb = String(decoding: build.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(deb.hasSuffix("/fire-agent_0.1.0_arm64.deb"), "\(deb)")
        let contents = String(decoding: try runCapturingOutput("/usr/bin/dpkg-deb", ["-c", deb]).stdout, as: UTF8.self)
        for (mode, path) in [
            ("-rwxr-xr-x", "./usr/bin/fire-agent"), ("-rw-r--r--", "./lib/systemd/system/fire-agent.service"),
            ("-rw-r--r--", "./usr/lib/sysusers.d/fire-agent.conf"), ("-rw-r--r--", "./usr/lib/tmpfiles.d/fire-agent.conf"),
            ("-rw-r--r--", "./usr/share/dbus-1/system.d/fire-agent-rauc.conf"),
            ("-rw-r--r--", "./usr/share/polkit-1/rules.d/50-fire-agent.rules"), ("-rw-------", "./etc/fire-agent/fire-agent.json5"),
        ] {
            #expect(contents.split(separator: "\n").contains { $0.hasPrefix(mode) && $0.hasSuffix(" " + path) }, "\(mode) \(path)")
        }
        let conffiles = String(decoding: try runCapturingOutput("/usr/bin/dpkg-deb", ["-I", deb, "conffiles"]).stdout, as: UTF8.self)
        #expect(conffiles.contains("/etc/fire-agent/fire-agent.json5"))
        let control = String(
            decoding: try runCapturingOutput("/usr/bin/dpkg-deb", ["-f", deb, "Architecture", "Package"]).stdout, as: UTF8.self)
        #expect(control.contains("Architecture: arm64") && control.contains("Package: fire-agent"), "\(control)")
        // An unknown architecture is refused, naming it.
        let wrong = try runCapturingOutput(
            "/bin/bash", [Self.root.appending(path: "packaging/build-deb.sh").path, "mips", binary, work + "/out"])
        #expect(wrong.status == 2 && wrong.stderr.contains("mips"))
    }

    @Test("the D-Bus policy denies RAUC to everyone but root and lets fire-agent install and mark, nothing else")
    func dbusPolicy() throws {
        let text = try String(contentsOf: Self.root.appending(path: "etc/fire-agent-rauc.conf"), encoding: .utf8)
        func block(_ opening: String) -> Substring? {
            guard let start = text.range(of: opening), let end = text.range(of: "</policy>", range: start.upperBound..<text.endIndex)
            else { return nil }
            return text[start.upperBound..<end.lowerBound]
        }
        let fallback = try #require(block("<policy context=\"default\">"))
        #expect(fallback.contains("<deny send_destination=\"de.pengutronix.rauc\"/>"))
        let agent = try #require(block("<policy user=\"fire-agent\">"))
        let allows = agent.split(separator: "\n").filter { $0.contains("<allow") }
        let members = Set(
            allows.compactMap { line -> String? in
                guard let range = line.range(of: "send_member=\"") else { return nil }
                return String(line[range.upperBound...].prefix { $0 != "\"" })
            })
        #expect(members == ["InstallBundle", "Install", "Mark", "GetSlotStatus", "GetPrimary", "Get", "GetAll"])
        #expect(allows.count == members.count, "an allow without a member: \(allows)")
        #expect(allows.allSatisfy { $0.contains("send_destination=\"de.pengutronix.rauc\"") })
    }
}
