import Foundation
import Testing

@testable import TinyFire

@Suite("Request identifiers")
struct RequestIdentifierTests {
    @Test("ids are distinct version-4 UUIDs with the RFC 4122 variant")
    func versionAndVariant() {
        let ids = (0..<10_000).map { _ in RequestIdentifiers.next() }
        #expect(Set(ids).count == ids.count)
        for id in ids.prefix(100) {
            let text = Array(id.uuidString)
            #expect(text[14] == "4", "\(id)")
            #expect("89AB".contains(text[19]), "\(id)")
        }
    }
}
