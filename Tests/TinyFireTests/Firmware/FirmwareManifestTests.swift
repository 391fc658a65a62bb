import Foundation
import Testing

@testable import FireAgentCore

@Suite("Firmware: versions, manifests and the update decision")
struct FirmwareManifestTests {
    @Test("semantic versions order as SemVer 2.0.0 says; what is not a version is refused")
    func versions() throws {
        let ordered = try [
            "0.9.9", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
            "1.0.0-rc.1", "1.0.0", "1.0.1", "1.2", "1.10.0", "v2.0.0", "10.0.0",
        ].map { try #require(SemanticVersion($0), "\($0)") }
        for (lower, higher) in zip(ordered, ordered.dropFirst()) { #expect(lower < higher, "\(lower) < \(higher)") }
        #expect(SemanticVersion("1.2") == SemanticVersion("1.2.0"))
        #expect(SemanticVersion("1.2.0+build.7") == SemanticVersion("v1.2.0"))
        for bad in [
            "", "1..2", "1.2.3.4", "a.b.c", "1.2.x", "1.0.0-", "1.0.0-rc..1", "1.0.0+", "-1.0.0", "99999999999999999999.0.0", "1.0.0-ä",
        ] {
            #expect(SemanticVersion(bad) == nil, "\(bad)")
        }
    }

    let base = URL(string: "https://updates.example/acme/gw/manifest.json")!

    func manifest(_ fields: String) -> [UInt8] {
        Array("{ \(fields) }".utf8)
    }

    let good = #"""
        "version": "2.1.0", "compatible": ["acme-gw-1", "acme-gw-2"], "image": "images/gw-2.1.0.img", "size": 73400320,
        "sha256": "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08", "expires": "2027-01-31T00:00:00Z",
        "notes": "fixes", "future": { "anything": 1 }
        """#

    @Test("a manifest is read with its image resolved against the manifest's URL; unknown fields are ignored")
    func parsesManifest() throws {
        let parsed = try FirmwareManifest.parse(manifest(good), from: base)
        #expect(parsed.version == SemanticVersion("2.1.0"))
        #expect(parsed.compatible == ["acme-gw-1", "acme-gw-2"])
        #expect(parsed.image.absoluteString == "https://updates.example/acme/gw/images/gw-2.1.0.img")
        #expect(parsed.size == 73_400_320)
        #expect(parsed.sha256.count == 32 && parsed.sha256.first == 0x9F && parsed.sha256.last == 0x08)
        #expect(parsed.expires == Date(timeIntervalSince1970: 1_801_353_600))
        #expect(parsed.notes == "fixes")
        let absolute = try FirmwareManifest.parse(
            manifest(good.replacingOccurrences(of: "images/gw-2.1.0.img", with: "http://cdn.example/x.img")), from: base)
        #expect(absolute.image.absoluteString == "http://cdn.example/x.img")
    }

    @Test("each bad field is refused by name; a key given twice and an oversized document too")
    func refusesBadManifests() {
        let cases: [(String, String)] = [
            (good.replacingOccurrences(of: #""version": "2.1.0","#, with: ""), "version is missing"),
            (good.replacingOccurrences(of: "2.1.0\",", with: "two\","), "version \"two\" is not a version"),
            (good.replacingOccurrences(of: #"["acme-gw-1", "acme-gw-2"]"#, with: "[]"), "compatible must be a non-empty array"),
            (good.replacingOccurrences(of: "images/gw-2.1.0.img", with: "ftp://x/y"), "is not an http(s) URL"),
            (good.replacingOccurrences(of: "73400320", with: "-5"), "size -5.0 is not a whole number"),
            (good.replacingOccurrences(of: "73400320", with: "1.5"), "is not a whole number"),
            (good.replacingOccurrences(of: "73400320", with: "\"big\""), "size must be a number"),
            (good.replacingOccurrences(of: "9F86D0", with: "XX86D0"), "sha256 must be 64 hexadecimal digits"),
            (good.replacingOccurrences(of: "2027-01-31T00:00:00Z", with: "next year"), "expires must be an RFC 3339 time"),
            (good.replacingOccurrences(of: "2027-01-31T00:00:00Z", with: "2027-02-30T00:00:00Z"), "expires must be an RFC 3339 time"),
            (good + #", "version": "9.9.9""#, "appears twice"),
        ]
        for (fields, expected) in cases {
            #expect(throws: FirmwareRefusal.self) { try FirmwareManifest.parse(manifest(fields), from: base) }
            do {
                _ = try FirmwareManifest.parse(manifest(fields), from: base)
            } catch {
                #expect(error.kind == .badManifest && error.message.contains(expected), "\(error) for \(expected)")
            }
        }
        let huge = manifest(good + ", \"pad\": \"" + String(repeating: "x", count: 70_000) + "\"")
        #expect(throws: FirmwareRefusal(kind: .badManifest, message: "\(huge.count) bytes, more than 65536")) {
            try FirmwareManifest.parse(huge, from: base)
        }
        #expect(throws: FirmwareRefusal.self) { try FirmwareManifest.parse(Array("[1]".utf8), from: base) }
    }

    @Test("RFC 3339 times: Z, offsets, fractions; impossible dates refused")
    func times() {
        #expect(FirmwareManifest.rfc3339("2027-01-31T00:00:00Z") == Date(timeIntervalSince1970: 1_801_353_600))
        #expect(FirmwareManifest.rfc3339("2027-01-31T01:00:00+01:00") == Date(timeIntervalSince1970: 1_801_353_600))
        #expect(FirmwareManifest.rfc3339("2027-01-30T23:00:00.5-01:00") == Date(timeIntervalSince1970: 1_801_353_600.5))
        for bad in [
            "2027-01-31", "2027-13-01T00:00:00Z", "2027-01-31T24:00:00Z", "2027-01-31T00:00:00", "2027-01-31T00:00:00+0100",
            "2027-02-29T00:00:00Z",
        ] {
            #expect(FirmwareManifest.rfc3339(bad) == nil, "\(bad)")
        }
    }

    @Test("the decision: expired, incompatible, same or older refused unless downgrades are allowed")
    func decision() throws {
        let parsed = try FirmwareManifest.parse(manifest(good), from: base)
        let before = Date(timeIntervalSince1970: 1_801_353_599)
        try UpdateDecision.check(
            parsed, deviceType: "acme-gw-2", highestAccepted: SemanticVersion("2.0.9"), allowDowngrade: false, now: before)
        func refusal(_ body: () throws -> Void) -> FirmwareRefusal.Kind? {
            do {
                try body()
                return nil
            } catch {
                return (error as? FirmwareRefusal)?.kind
            }
        }
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: nil, allowDowngrade: false,
                    now: Date(timeIntervalSince1970: 1_801_353_600))
            }
                == .expired)
        #expect(
            refusal { try UpdateDecision.check(parsed, deviceType: "other", highestAccepted: nil, allowDowngrade: false, now: before) }
                == .incompatible)
        // The replayed older manifest: refused against the highest version ever accepted.
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: SemanticVersion("2.1.0"), allowDowngrade: false, now: before)
            }
                == .notNewer)
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: SemanticVersion("3.0.0-rc.1"), allowDowngrade: false, now: before)
            }
                == .notNewer)
        #expect(
            refusal {
                try UpdateDecision.check(
                    parsed, deviceType: "acme-gw-1", highestAccepted: SemanticVersion("3.0.0"), allowDowngrade: true, now: before)
            }
                == nil)
    }
}
