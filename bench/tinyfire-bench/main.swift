import Dispatch
import TinyFire

// In-process benchmark loops for bench/run.sh.
//
//   tinyfire-bench keepalive URL COUNT   COUNT sequential GETs on one Session (one keep-alive
//                                        connection); prints "requests=N seconds=S rps=R".
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
        guard arguments.count == 4, arguments[1] == "keepalive", let count = Int(arguments[3]), count > 0 else {
            print("usage: tinyfire-bench keepalive URL COUNT")
            exit(64)
        }
        let url = arguments[2]
        let session = Session()
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
}
