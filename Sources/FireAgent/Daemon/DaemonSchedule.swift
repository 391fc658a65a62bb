/// When the daemon collects, queues and tells systemd it is alive, as a value fed the time:
/// no clocks, no threads, no randomness of its own (the caller passes a number in 0...1 where a
/// jitter is drawn), so every branch is a unit test.
///
/// - Collection runs every `collectEvery` on a fixed cadence (a late round does not shift the
///   next ones; rounds missed while the machine was suspended are not made up).
/// - Sync — queueing what was collected and what is in the spool — runs every `syncEvery`
///   stretched or shrunk by up to `jitter` either way, and the first one falls at a random
///   point of the first interval: boards started together (a fleet powered back after an
///   outage) spread over the interval instead of arriving in the same second.
/// - A route coming back makes a sync due at once (the queue then delivers what waited).
/// - The watchdog, when systemd asked for one, is due every half of its interval.
///
/// Times are `Duration`s since an origin the caller picks (a monotonic clock's start).
package struct DaemonSchedule: Sendable, Equatable {
    /// Something that is due.
    package enum Job: Sendable, Equatable, CaseIterable {
        /// Run the collectors.
        case collect
        /// Queue pending points and the spool.
        case sync
        /// Tell systemd the loop is alive (`WATCHDOG=1`).
        case watchdog
    }

    /// The collection period.
    package private(set) var collectEvery: Duration
    /// The sync period before jitter.
    package private(set) var syncEvery: Duration
    /// The jitter fraction (0...0.5).
    package private(set) var jitter: Double
    /// How often the watchdog is fed, or nil without one.
    package let watchdogEvery: Duration?

    /// When collection is next due.
    package private(set) var nextCollect: Duration
    /// When sync is next due.
    package private(set) var nextSync: Duration
    /// When the watchdog is next due, or nil without one.
    package private(set) var nextWatchdog: Duration?

    /// A schedule starting at `now`: collection at once, the first sync within the first
    /// jittered interval, the watchdog at once.
    /// - Parameters:
    ///   - collectEvery: collection period (positive).
    ///   - syncEvery: sync period (positive).
    ///   - jitter: spread fraction, clamped to 0...0.5.
    ///   - watchdogInterval: systemd's `WatchdogSec` (from `WATCHDOG_USEC`), or nil.
    ///   - now: the start.
    ///   - random: a number in 0...1 placing the first sync.
    package init(
        collectEvery: Duration, syncEvery: Duration, jitter: Double, watchdogInterval: Duration?, now: Duration, random: Double
    ) {
        self.collectEvery = max(collectEvery, .milliseconds(1))
        self.syncEvery = max(syncEvery, .milliseconds(1))
        self.jitter = min(max(jitter, 0), 0.5)
        watchdogEvery = watchdogInterval.map { max($0 / 2, .milliseconds(1)) }
        nextCollect = now
        // The first sync comes after the first collection, somewhere in the first interval.
        nextSync = now + Self.scale(self.syncEvery, by: 0.1 + 0.9 * Self.clamp(random))
        nextWatchdog = watchdogEvery.map { _ in now }
    }

    /// The earliest time anything is due.
    package var nextDeadline: Duration {
        [nextCollect, nextSync, nextWatchdog].compactMap { $0 }.min() ?? nextCollect
    }

    /// The jobs due at `now`, each rescheduled: collection on its cadence, sync one jittered
    /// period later, the watchdog half its interval later.
    /// - Parameters:
    ///   - now: the time.
    ///   - random: a number in 0...1 drawing the next sync's jitter.
    /// - Returns: the jobs to run now, in the order collect, sync, watchdog.
    package mutating func due(at now: Duration, random: Double) -> [Job] {
        var jobs: [Job] = []
        if nextCollect <= now {
            jobs.append(.collect)
            nextCollect = nextCollect + collectEvery
            // Suspended or stalled past a whole period: start a new cadence from now.
            if nextCollect <= now { nextCollect = now + collectEvery }
        }
        if nextSync <= now {
            jobs.append(.sync)
            nextSync = now + jittered(random)
        }
        if let due = nextWatchdog, let every = watchdogEvery, due <= now {
            jobs.append(.watchdog)
            nextWatchdog = now + every
        }
        return jobs
    }

    /// The route to the server came back: a sync is due now.
    /// - Parameter now: the time.
    package mutating func routeReturned(at now: Duration) {
        nextSync = min(nextSync, now)
    }

    /// A reload changed the periods: the next collection and sync keep their place unless the
    /// new period brings them sooner.
    /// - Parameters:
    ///   - collectEvery: the new collection period.
    ///   - syncEvery: the new sync period.
    ///   - jitter: the new jitter.
    ///   - now: the time.
    package mutating func reconfigure(collectEvery: Duration, syncEvery: Duration, jitter: Double, now: Duration) {
        self.collectEvery = max(collectEvery, .milliseconds(1))
        self.syncEvery = max(syncEvery, .milliseconds(1))
        self.jitter = min(max(jitter, 0), 0.5)
        nextCollect = min(nextCollect, now + self.collectEvery)
        nextSync = min(nextSync, now + Self.scale(self.syncEvery, by: 1 + self.jitter))
    }

    /// One sync period with its jitter: `syncEvery × (1 ± jitter)`.
    private func jittered(_ random: Double) -> Duration {
        Self.scale(syncEvery, by: 1 + jitter * (2 * Self.clamp(random) - 1))
    }

    private static func clamp(_ value: Double) -> Double { value.isNaN ? 0.5 : min(max(value, 0), 1) }

    private static func scale(_ duration: Duration, by factor: Double) -> Duration {
        .nanoseconds(Int64(max(0, min(Double(duration.totalNanoseconds) * factor, 9.0e18))))
    }
}
