import CTinyFireSystem
import Foundation
import Synchronization
import Testing

@testable import TinyFire

/// Where the resolver answers: a numeric address at once on the caller's thread (no thread
/// started: a GET to a fixed address costs one thread less, which a board's start-up feels), a
/// name on a lookup thread of its own.
@Suite("DNSResolver: numeric addresses answered at once, names on a lookup thread")
struct DNSResolverTests {
    /// What one `resolve` call saw.
    struct Answer: Sendable {
        var addresses: [String]
        var error: String?
        var thread: UInt
        var beforeReturn: Bool
    }

    /// Calls `resolve` and waits for its answer.
    static func resolve(_ host: String, port: Int) -> Answer? {
        let answer = Mutex<Answer?>(nil)
        let returned = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        DNSResolver.resolve(host: host, port: port) { result in
            let seen: Answer
            switch result {
            case .success(let addresses):
                seen = Answer(
                    addresses: addresses.map(\.description), error: nil, thread: UInt(tinyfire_thread_id()),
                    beforeReturn: !returned.load(ordering: .acquiring))
            case .failure(let error):
                seen = Answer(
                    addresses: [], error: error.message, thread: UInt(tinyfire_thread_id()),
                    beforeReturn: !returned.load(ordering: .acquiring))
            }
            answer.withLock { $0 = seen }
            done.signal()
        }
        returned.store(true, ordering: .releasing)
        guard done.wait(timeout: .now() + 30) == .success else { return nil }
        return answer.withLock { $0 }
    }

    @Test(
        "a numeric address is answered before resolve returns, on the caller's thread",
        arguments: [("127.0.0.1", "127.0.0.1:8080"), ("::1", "[::1]:8080"), ("10.1.2.3", "10.1.2.3:8080")])
    func numericAtOnce(host: String, expected: String) throws {
        let answer = try #require(Self.resolve(host, port: 8080))
        #expect(answer.error == nil)
        #expect(answer.addresses == [expected])
        #expect(answer.beforeReturn, "the answer came after resolve returned: a thread was started")
        #expect(answer.thread == UInt(tinyfire_thread_id()))
    }

    @Test("a name is looked up on a thread of its own (getaddrinfo may block)")
    func nameOnLookupThread() throws {
        let answer = try #require(Self.resolve("localhost", port: 80))
        #expect(answer.error == nil)
        #expect(answer.addresses.contains("127.0.0.1:80") || answer.addresses.contains("[::1]:80"))
        #expect(answer.thread != UInt(tinyfire_thread_id()))
    }

}
