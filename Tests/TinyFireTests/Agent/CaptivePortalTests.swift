import FireAgent
import Foundation
import HTTPTypes
import Synchronization
import Testing

@testable import TinyFire

/// A box in the path that answers for the server (hotel, train and guest Wi-Fi): a 302 to its
/// login page, or its page as a 200 to the POST itself. Nothing may count as delivered.
final class CaptivePortal: @unchecked Sendable {
    enum Mode { case redirect, page, server }
    /// What the box does now, and the lines the real server took.
    final class Shared: Sendable {
        let mode = Mutex(Mode.redirect)
        let received = Mutex<[String]>([])
    }
    let shared = Shared()
    let server: HostileServer

    init() throws {
        let shared = self.shared
        server = try HostileServer { client in
            while true {
                let head = client.readRequest()
                guard let line = head.split(separator: "\r\n").first, !line.isEmpty else { return }
                let page = "<html><body>Welcome! Accept the terms to go online.</body></html>"
                let answer: String
                switch shared.mode.withLock({ $0 }) {
                case .redirect where line.hasPrefix("POST "):
                    answer = "HTTP/1.1 302 Found\r\nLocation: /portal?from=write\r\nContent-Length: 0\r\n\r\n"
                case .redirect, .page:
                    answer = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: \(page.utf8.count)\r\n\r\n\(page)"
                case .server:
                    var body = client.lastBody
                    if head.lowercased().contains("content-encoding: gzip"), let plain = try? Gzip.decompress(Array(body), limit: 1 << 20) {
                        body = Data(plain)
                    }
                    shared.received.withLock { $0 += String(decoding: body, as: UTF8.self).split(separator: "\n").map(String.init) }
                    answer = "HTTP/1.1 204 No Content\r\n\r\n"
                }
                guard client.send(answer) else { return }
            }
        }
    }

    var base: String { server.base }
    func stop() { server.stop() }
}

@Suite("a captive portal answers for the server: nothing counts as delivered", .serialized)
struct CaptivePortalTests {
    @Test(
        "fire-agent: a 302 to a portal page and a 200 HTML page keep the batch queued, the reason names the redirect; the real server gets every point once"
    )
    func agent() throws {
        let portal = try CaptivePortal()
        defer { portal.stop() }
        let directory = try agentScratch("portal")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let text = """
            {
              device: { id: "board-wifi" },
              server: { url: "\(portal.base)", connectTimeout: "2s" },
              telemetry: { influx: { database: "fleet", precision: "ns" }, spoolDirectory: "spool",
                           collectors: { cpu: false, memory: false, load: false, uptime: false, disk: false, network: false,
                                         thermal: false, pressure: false, agent: false } },
              queue: { directory: "queue" },
            }
            """
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(filePath: directory + "/agent.json5"))
        let config = directory + "/agent.json5"
        try dropInSpool("wifi seq=1i 1700000000000000001\nwifi seq=2i 1700000000000000002\n", as: "a.lp", in: directory)
        for mode in [CaptivePortal.Mode.redirect, .page] {
            portal.shared.mode.withLock { $0 = mode }
            let sync = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
            #expect(sync.status != 0, "\(mode): the portal's answer counted as a delivery: \(sync.stderr)")
            let queued = try runCapturingOutput(try fireAgentPath(), ["queue", "list", "--dir", directory + "/queue"])
            #expect(
                String(decoding: queued.stdout, as: UTF8.self).contains("/write"), "\(mode): the batch left the queue: \(queued.stderr)")
            let said = String(decoding: sync.stdout, as: UTF8.self) + sync.stderr
            if mode == .redirect {
                #expect(said.contains("redirected to /portal?from=write"), "\(said)")
            } else {
                #expect(said.contains("not InfluxDB's 204") || said.contains("not accepted"), "\(said)")
            }
        }
        portal.shared.mode.withLock { $0 = .server }
        let sync = try runCapturingOutput(try fireAgentPath(), ["sync", "--once", "--config", config])
        #expect(sync.status == 0, "\(sync.stderr)")
        // (Spool points carry the board's device tag.)
        #expect(
            portal.shared.received.withLock { $0 } == [
                "wifi,device=board-wifi seq=1i 1700000000000000001", "wifi,device=board-wifi seq=2i 1700000000000000002",
            ])
    }

    @Test(
        "OfflineQueue (library default): a 302 to another page is not followed and not a delivery; the record stays until a 2xx from the server"
    )
    func library() throws {
        let portal = try CaptivePortal()
        defer { portal.stop() }
        let directory = try makeTemporaryDirectory("queue-portal")
        let queue = try OfflineQueue(
            directory: directory, configuration: .init(backoff: .init(initial: .milliseconds(20), maximum: .milliseconds(40))))
        defer { queue.close() }
        var request = URLRequest(url: URL(string: "\(portal.base)/api/events")!, method: .post)
        request.httpBody = Data("event\n".utf8)
        _ = try queue.enqueue(request)
        let flushed = Mutex<OfflineQueue.FlushResult?>(nil)
        let done = DispatchSemaphore(value: 0)
        queue.flush { result in
            flushed.withLock { $0 = try? result.get() }
            done.signal()
        }
        done.wait()
        let result = try #require(flushed.withLock { $0 })
        #expect(result.delivered == 0 && result.remaining == 1, "\(result)")
        #expect(result.failure?.contains("redirected to /portal?from=write") == true, "\(String(describing: result.failure))")
        portal.shared.mode.withLock { $0 = .server }
        queue.flush { result in
            flushed.withLock { $0 = try? result.get() }
            done.signal()
        }
        done.wait()
        #expect(flushed.withLock { $0 }?.delivered == 1)
        #expect(portal.shared.received.withLock { $0 } == ["event"])
    }
}
