import Dispatch
import Synchronization
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
//   tinyfire-bench enqueue DIR COUNT THREADS BYTES
//                                        COUNT durable enqueues of a POST with a BYTES body into
//                                        an offline queue in DIR, from THREADS threads (1 gives
//                                        one latency per enqueue); prints "enqueues=N threads=T
//                                        seconds=S per_second=R p50_us=… p99_us=… max_us=…".
//   tinyfire-bench replay DIR             sends every record queued in DIR (flush), in order;
//                                        prints "delivered=N seconds=S per_second=R".
// TINYFIRE_CACERT names a CA file to trust for https URLs; TINYFIRE_PROXY a proxy URL for
// keepalive (curl's -x syntax).
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
        if arguments.count == 6, arguments[1] == "enqueue", let count = Int(arguments[3]), let threads = Int(arguments[4]),
            let bytes = Int(arguments[5]), count > 0, threads > 0
        {
            enqueue(directory: arguments[2], count: count, threads: threads, bodyBytes: bytes)
            return
        }
        if arguments.count == 3, arguments[1] == "replay" {
            await replay(directory: arguments[2])
            return
        }
        if arguments.count == 5, arguments[1] == "handshakes", let count = Int(arguments[3]), count > 0 {
            tls.sessionResumption = arguments[4] == "resume"
            await handshakes(url: arguments[2], count: count, tls: tls)
            return
        }
        if arguments.count == 3, arguments[1] == "stream-upload" {
            await streamUpload(url: arguments[2])
            return
        }
        guard arguments.count == 4, arguments[1] == "keepalive", let count = Int(arguments[3]), count > 0 else {
            print(
                "usage: tinyfire-bench keepalive URL COUNT | handshakes URL COUNT resume|noresume | enqueue DIR COUNT THREADS BYTES"
                    + " | replay DIR | stream-upload URL"
            )
            exit(64)
        }
        let url = arguments[2]
        var configuration = SessionConfiguration(tls: tls)
        if let proxy = ProcessInfo.processInfo.environment["TINYFIRE_PROXY"] {
            do {
                configuration.proxy = ProxySettings(all: try Proxy(url: proxy))
            } catch {
                print("TINYFIRE_PROXY: \(error)")
                exit(64)
            }
        }
        let session = Session(configuration: configuration)
        // Warm-up: open the connection.
        guard await session.request(url).serializingData().response.error == nil else {
            print("warm-up request failed")
            exit(1)
        }
        let start = now()
        var bytes = 0
        for _ in 0..<count {
            let response = await session.request(url).serializingData().response
            guard let data = response.data, response.error == nil else {
                print("request failed: \(String(describing: response.error))")
                exit(1)
            }
            bytes += data.count
        }
        let seconds = now() - start
        print("requests=\(count) bytes=\(bytes) seconds=\(seconds) rps=\(Int(Double(count) / seconds))")
    }

    /// PUTs standard input to `url` as a stream of unknown length (chunked), as
    /// `upload(_ stream:)` does for a pipe or a sensor.
    static func streamUpload(url: String) async {
        let session = Session()
        let response = await session.upload(FileDescriptorByteStream(fileDescriptor: 0), to: url, method: .put)
            .serializingData().response
        guard response.error == nil, response.response?.status.code == 200 else {
            print("upload failed: \(String(describing: response.error))")
            exit(1)
        }
    }

    static func handshakes(url: String, count: Int, tls: TLSConfiguration) async {
        let session = Session(configuration: SessionConfiguration(tls: tls))
        let start = now()
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
        let seconds = now() - start
        print("handshakes=\(count) resumed=\(resumed) seconds=\(seconds)")
    }

    /// Seconds on the monotonic clock.
    static func now() -> Double {
        var clock = timespec()
        clock_gettime(CLOCK_MONOTONIC, &clock)
        return Double(clock.tv_sec) + Double(clock.tv_nsec) / 1e9
    }

    /// Durable enqueues: each returns once its record is written and fdatasync'd.
    static func enqueue(directory: String, count: Int, threads: Int, bodyBytes: Int) {
        let url = ProcessInfo.processInfo.environment["TINYFIRE_BENCH_URL"] ?? "http://127.0.0.1:1/ingest/bench"
        let queue: OfflineQueue
        do {
            queue = try OfflineQueue(directory: directory, configuration: .init(maxRecords: 10_000_000, maxBytes: 1 << 40))
        } catch {
            print("cannot open the queue: \(error)")
            exit(1)
        }
        let body = Data(repeating: 0x61, count: bodyBytes)
        let latencies = Mutex<[Double]>([])
        let failures = Mutex(0)
        let start = now()
        // Real threads (concurrentPerform would run only as many as there are cores, and
        // group commit needs writers that wait while another syncs).
        var running: [pthread_t] = []
        for thread in 0..<threads {
            running.append(
                spawn {
                    let share = count / threads + (thread < count % threads ? 1 : 0)
                    var mine: [Double] = []
                    mine.reserveCapacity(share)
                    for n in 0..<share {
                        guard var request = try? URLRequest(url: "\(url)/\(thread)-\(n)", method: .post) else { continue }
                        request.httpBody = body
                        let before = now()
                        do {
                            try queue.enqueue(request)
                            mine.append(now() - before)
                        } catch {
                            failures.withLock { $0 += 1 }
                        }
                    }
                    latencies.withLock { $0 += mine }
                })
        }
        for thread in running { pthread_join(thread, nil) }
        let seconds = now() - start
        queue.close()
        let sorted = latencies.withLock { $0 }.sorted()
        guard !sorted.isEmpty, failures.withLock({ $0 }) == 0 else {
            print("enqueue failed \(failures.withLock { $0 }) times")
            exit(1)
        }
        func percentile(_ p: Double) -> Int { Int(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1e6) }
        print(
            "enqueues=\(sorted.count) threads=\(threads) seconds=\(seconds) per_second=\(Int(Double(sorted.count) / seconds)) "
                + "p50_us=\(percentile(0.5)) p99_us=\(percentile(0.99)) max_us=\(Int(sorted[sorted.count - 1] * 1e6))")
    }

    /// Sends everything queued in `directory`, in order, one request at a time.
    static func replay(directory: String) async {
        do {
            let queue = try OfflineQueue(directory: directory)
            let start = now()
            let result = try await queue.flush()
            let seconds = now() - start
            queue.close()
            guard result.remaining == 0 else {
                print("replay stopped: \(result.failure ?? "?") (remaining \(result.remaining))")
                exit(1)
            }
            print("delivered=\(result.delivered) seconds=\(seconds) per_second=\(Int(Double(result.delivered) / seconds))")
        } catch {
            print("replay failed: \(error)")
            exit(1)
        }
    }
}

/// Runs `body` on a new POSIX thread.
private final class ThreadBody {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}

private func spawn(_ body: @escaping () -> Void) -> pthread_t {
    var thread = pthread_t()
    let context = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    let status = pthread_create(
        &thread, nil,
        { context in
            Unmanaged<ThreadBody>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        }, context)
    guard status == 0 else {
        print("pthread_create failed: \(status)")
        exit(1)
    }
    return thread
}
