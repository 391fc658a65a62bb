import ArgumentParser
import Dispatch
import FireAgentCore
import HTTPTypes
import Synchronization
import TinyFire

#if canImport(Glibc)
    import Glibc
#endif
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fire-agent queue`: the durable offline queue, from the shell.
struct QueueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "Inspect, fill and flush a durable offline request queue (docs/OFFLINE.md).",
        subcommands: [List.self, Stats.self, Flush.self, Add.self]
    )

    /// Options every queue subcommand takes.
    struct Location: ParsableArguments {
        @Option(name: .customLong("dir"), help: "The queue's directory.")
        var directory: String
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "One line per queued record, oldest first: SEQUENCE AGE_S METHOD URL BODY_BYTES IDEMPOTENCY_KEY.",
            discussion: "Reads without taking the queue's lock, so it works while the agent runs.")

        @OptionGroup var location: Location
        @Option(help: "Print at most this many records.") var limit: Int = .max

        func run() throws {
            let status = AgentCommandLine.queueList(directory: location.directory, limit: limit)
            if status != 0 { throw ExitCode(status) }
        }
    }

    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Counts, bytes, the oldest record's age and the drop counters, as key=value lines.",
            discussion: "Reads without taking the queue's lock, so it works while the agent runs.")

        @OptionGroup var location: Location

        func run() throws {
            let status = AgentCommandLine.queueStats(directory: location.directory)
            if status != 0 { throw ExitCode(status) }
        }
    }

    struct Flush: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send every queued record now, in order; stop at the first that fails.",
            discussion: """
                Prints 'delivered N discarded N remaining N', and the failure on stderr. Exit 0 when \
                the queue is empty afterwards, 7 when a record could not be delivered. Takes the \
                queue's lock: not while the agent has the queue open.
                """)

        @OptionGroup var location: Location
        @OptionGroup var tlsOptions: TLSOptions
        @OptionGroup var proxyOptions: ProxyOptions
        @Option(name: .customLong("timeout"), help: "Time allowed per request, in seconds (default 60).")
        var timeout: Double = 60
        @Option(name: .customLong("discard-status"), help: "Statuses that remove a record without success (e.g. 400,422).")
        var discardStatus: String?

        func validate() throws {
            try validateSeconds([("--timeout", timeout)])
        }

        func run() throws {
            let status = AgentCommandLine.queueFlush(
                directory: location.directory, timeout: timeout, discardStatus: discardStatus,
                options: transferOptions(tlsOptions, proxyOptions))
            if status != 0 { throw ExitCode(status) }
        }
    }

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Queue a request durably; prints 'queued SEQUENCE IDEMPOTENCY_KEY' once it is on disk.",
            discussion: """
                With --repeat N, queues N requests one after another, replacing {n} in the URL and \
                the body with a counter that starts at --start; each line is printed when its \
                request is durable. Exit 0 when all were queued; 23 when the disk is full or a \
                write failed; 63 when the queue is full.
                """)

        @OptionGroup var location: Location
        @Argument(help: "The URL the request goes to.") var url: String
        @Option(name: [.customShort("X"), .long], help: "Method (default POST with a body, else GET).") var method: String?
        @Option(name: [.customShort("H"), .long], help: "Header 'Name: value' (repeatable).") var header: [String] = []
        @Option(name: [.customShort("d"), .long], help: "The body; @FILE queues a copy of the file.") var data: String?
        @Option(name: .long, help: "Queue this many requests.") var `repeat`: Int = 1
        @Option(name: .long, help: "First value of {n}.") var start: Int = 1
        @Option(name: .customLong("max-records"), help: "The queue's record bound.")
        var maxRecords: Int = OfflineQueue.Configuration.defaultMaxRecords
        @Option(name: .customLong("max-bytes"), help: "The queue's byte bound.")
        var maxBytes: Int64 = OfflineQueue.Configuration.defaultMaxBytes
        @Flag(name: .customLong("drop-oldest"), help: "When full, drop the oldest records instead of refusing.")
        var dropOldest = false

        func run() throws {
            let status = AgentCommandLine.queueAdd(
                directory: location.directory, url: url, method: method, headers: header, data: data, count: self.repeat, start: start,
                maxRecords: maxRecords, maxBytes: maxBytes, dropOldest: dropOldest)
            if status != 0 { throw ExitCode(status) }
        }
    }
}
