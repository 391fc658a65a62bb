import Foundation
import Synchronization

/// A real InfluxDB 1.x (`influxd` from Debian's `influxdb`) on a free loopback port, with its
/// data in a temporary directory; one per test that needs it. `stop()` and `start()` make an
/// outage while keeping the data.
final class InfluxFixture: @unchecked Sendable {
    let directory: String
    let port: Int
    var base: String { "http://127.0.0.1:\(port)" }
    private var process: ChildProcess?

    init(database: String = "fleet") throws {
        guard which("influxd") != nil else {
            throw FixtureError(description: "influxd is not installed (apt-get install influxdb; scripts/install-deps.sh does)")
        }
        directory = FileManager.default.temporaryDirectory.appending(path: "tinyfire-influx-\(UUID().uuidString.prefix(8))").path
        port = freePort()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let config = """
            reporting-disabled = true
            bind-address = "127.0.0.1:\(freePort())"
            [meta]
              dir = "\(directory)/meta"
            [data]
              dir = "\(directory)/data"
              wal-dir = "\(directory)/wal"
              query-log-enabled = false
            [http]
              bind-address = "127.0.0.1:\(port)"
              log-enabled = false
            [monitor]
              store-enabled = false
            [subscriber]
              enabled = false
            [continuous_queries]
              enabled = false
            """
        try Data(config.utf8).write(to: URL(filePath: directory + "/influxdb.conf"))
        try start()
        _ = try query("CREATE DATABASE \(database)")
    }

    deinit {
        process?.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Starts influxd (again, after `stop()`: same data).
    func start() throws {
        guard let influxd = which("influxd") else { throw FixtureError(description: "influxd is not installed") }
        process = try ChildProcess(
            influxd, ["-config", directory + "/influxdb.conf"], stdout: .file(directory + "/log"),
            stderr: .file(directory + "/log"))
        try waitForPort(port, timeout: 30)
        // The port opens before the HTTP service answers /ping.
        _ = waitUntil(within: .seconds(30)) { (try? self.ping()) == true }
    }

    /// Stops influxd (SIGTERM); the data stays.
    func stop() {
        process?.stop()
        process = nil
    }

    private func ping() throws -> Bool {
        let result = try runCapturingOutput("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "\(base)/ping"])
        return String(decoding: result.stdout, as: UTF8.self) == "204"
    }

    /// Runs an InfluxQL statement; returns the JSON answer.
    func query(_ statement: String, database: String = "fleet") throws -> [String: Any] {
        let result = try runCapturingOutput(
            "/usr/bin/curl", ["-s", "-G", "\(base)/query", "--data-urlencode", "db=\(database)", "--data-urlencode", "q=\(statement)"])
        return (try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any]) ?? [:]
    }

    /// The rows of the first series of a query, as arrays of values.
    func rows(_ statement: String, database: String = "fleet") throws -> [[Any]] {
        let answer = try query(statement, database: database)
        let results = answer["results"] as? [[String: Any]]
        let series = results?.first?["series"] as? [[String: Any]]
        return (series?.first?["values"] as? [[Any]]) ?? []
    }

    /// Measurement names in the database.
    func measurements(database: String = "fleet") throws -> [String] {
        try rows("SHOW MEASUREMENTS", database: database).compactMap { $0.first as? String }
    }

    /// How many points of `measurement` have `field` (0 when none).
    func count(_ measurement: String, field: String, database: String = "fleet") throws -> Int {
        let rows = try rows("SELECT count(\"\(field)\") FROM \"\(measurement)\"", database: database)
        return (rows.first?.last as? NSNumber)?.intValue ?? (rows.first?.last as? Int) ?? 0
    }
}
