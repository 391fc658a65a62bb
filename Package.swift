// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "TinyFire",
    products: [
        .library(name: "TinyFire", targets: ["TinyFire"]),
        // InputStream uploads, for code that has full Foundation (TinyFire itself never links it).
        .library(name: "TinyFireFoundation", targets: ["TinyFireFoundation"]),
        .executable(name: "fire-agent", targets: ["fire-agent"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // zlib, linked from the system (Debian: zlib1g-dev).
        .systemLibrary(
            name: "CZlib",
            path: "Sources/CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // epoll, eventfd and GNU extensions that Swift's Glibc module does not export.
        .target(name: "CTinyFireSystem", path: "Sources/CTinyFireSystem"),
        // A narrow shim over mbedTLS (Debian: libmbedtls-dev; 2.28 and 3.x).
        .target(
            name: "CTinyFireTLS",
            path: "Sources/CTinyFireTLS",
            linkerSettings: [.linkedLibrary("mbedtls"), .linkedLibrary("mbedx509"), .linkedLibrary("mbedcrypto")]
        ),
        // What fire-agent and TinyFire both stand on, written in the Embedded-Swift subset (no
        // Foundation, Dispatch, existentials of non-class protocols or untyped throws) so that
        // cross/embedded/build.sh also compiles it for boards (armv7, aarch64) without a runtime.
        .target(
            name: "TinyFireCore",
            dependencies: [
                "CZlib",
                "CTinyFireSystem",
                "CTinyFireTLS",
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        .target(
            name: "TinyFire",
            dependencies: [
                "TinyFireCore",
                "CZlib",
                "CTinyFireSystem",
                "CTinyFireTLS",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "TinyFireFoundation", dependencies: ["TinyFire"]),
        // fire-agent: all of it — config, telemetry, daemon, firmware updates, the commands — in
        // the Embedded subset on TinyFireCore alone; cross/embedded/build.sh compiles it for
        // boards too, and the full-Swift fire-agent is built on it alone.
        .target(
            name: "FireAgent",
            dependencies: ["TinyFireCore", .product(name: "HTTPTypes", package: "swift-http-types")],
            // Crash points for tests (CrashPoints.swift): in debug builds only, never in a release
            // binary (nor in the Embedded one, which cross/embedded/build.sh compiles without it).
            swiftSettings: [.define("FIRE_AGENT_CRASH_POINTS", .when(configuration: .debug))]),
        // fire-agent: AgentCommandLine's entry point; the same file is the Embedded build's.
        .executableTarget(name: "fire-agent", dependencies: ["FireAgent"]),
        .executableTarget(
            name: "tinyfire-bench",
            dependencies: ["TinyFire"],
            path: "bench/tinyfire-bench"
        ),
        // Alamofire's README snippets, ported; built with the package and run by a test.
        .executableTarget(
            name: "alamofire-readme-example",
            dependencies: ["TinyFire"],
            path: "Examples/AlamofireReadme"
        ),
        // Alamofire 4.x-style calls (`parameters: [String: Any]`, `encoding:`, `responseJSON`),
        // which Alamofire 5 deprecates and still ships; built with the package and run by a test.
        .executableTarget(
            name: "alamofire-4x-example",
            dependencies: ["TinyFire"],
            path: "Examples/Alamofire4x"
        ),
        .testTarget(
            name: "TinyFireTests",
            dependencies: [
                "TinyFireCore",
                "TinyFire",
                "TinyFireFoundation",
                "FireAgent",
                "CZlib",
                "CTinyFireSystem",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ]
)
