// armv7 Embedded Swift: a method's self (passed by address in r10, swiftself) is clobbered by
// the callee (ldm r10! with writeback, r10 not saved), and the caller's second call reads the
// wrong fields.
struct Window {
    var days: Set<Int>
    var start: Int
    var end: Int
    let name: String

    @inline(never)
    func contains(weekday: Int, minute: Int) -> Bool {
        if start < end { return days.contains(weekday) && minute >= start && minute < end }
        return (days.contains(weekday) && minute >= start) || (days.contains((weekday + 6) % 7) && minute < end)
    }
}

@inline(never) func make() -> Window? { Window(days: [5], start: 1320, end: 120, name: "x") }

@main struct Main {
    static func main() {
        let window = make()
        let inside = window.map { [$0.contains(weekday: 5, minute: 1410), $0.contains(weekday: 6, minute: 60)] }
        print(inside == [true, true] ? "ok" : "wrong")
    }
}
