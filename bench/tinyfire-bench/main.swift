import Dispatch
import TinyFire

// In-process benchmark loops for bench/run.sh.
//
//   tinyfire-bench keepalive URL COUNT   COUNT sequential GETs on one Session (one keep-alive
//                                        connection); prints "requests=N seconds=S rps=R".
//   tinyfire-bench handshakes URL COUNT resume|noresume
//                                        COUNT sequential GETs, each on a new connection
//                                        (point it at a URL whose server closes the
//                                        connection after each response), with or without TLS session
//                                        resumption; prints "handshakes=N resumed=R seconds=S".
// TINYFIRE_CACERT names a CA file to trust for https URLs.
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

@main
struct TinyFireBench {
    /// Synchronous entry point (see fire-agent's FireAgent.swift for why): the loop runs in a
    /// detached task and the main thread waits for it.
    static func main() {
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            await run()
            done.signal()
        }
        done.wait()
    }

    static func run() async {
        let arguments = CommandLine.arguments
        var tls = TLSConfiguration()
        if let ca = ProcessInfo.processInfo.environment["TINYFIRE_CACERT"] { tls.caCertificateFiles = [ca] }
        if arguments.count == 5, arguments[1] == "handshakes", let count = Int(arguments[3]), count > 0 {
            tls.sessionResumption = arguments[4] == "resume"
            await handshakes(url: arguments[2], count: count, tls: tls)
            return
        }
        guard arguments.count == 4, arguments[1] == "keepalive", let count = Int(arguments[3]), count > 0 else {
            print("usage: tinyfire-bench keepalive URL COUNT | handshakes URL COUNT resume|noresume")
            exit(64)
        }
        let url = arguments[2]
        let session = Session(configuration: SessionConfiguration(tls: tls))
        // Warm-up: open the connection.
        guard await session.request(url).serializingData().response.error == nil else {
            print("warm-up request failed")
            exit(1)
        }
        var clock = timespec()
        clock_gettime(CLOCK_MONOTONIC, &clock)
        let start = Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9
        var bytes = 0
        for _ in 0..<count {
            let response = await session.request(url).serializingData().response
            guard let data = response.data, response.error == nil else {
                print("request failed: \(String(describing: response.error))")
                exit(1)
            }
            bytes += data.count
        }
        clock_gettime(CLOCK_MONOTONIC, &clock)
        let seconds = Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9 - start
        print("requests=\(count) bytes=\(bytes) seconds=\(seconds) rps=\(Int(Double(count) / seconds))")
    }

    static func handshakes(url: String, count: Int, tls: TLSConfiguration) async {
        let session = Session(configuration: SessionConfiguration(tls: tls))
        var clock = timespec()
        clock_gettime(CLOCK_MONOTONIC, &clock)
        let start = Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9
        var resumed = 0
        for _ in 0..<count {
            let request = session.request(url)
            let response = await request.serializingResponse().response
            guard response.error == nil else {
                print("request failed: \(String(describing: response.error))")
                exit(1)
            }
            if request.metrics?.tls?.resumed == true { resumed += 1 }
        }
        clock_gettime(CLOCK_MONOTONIC, &clock)
        let seconds = Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9 - start
        print("handshakes=\(count) resumed=\(resumed) seconds=\(seconds)")
    }
}
