import HTTPTypes

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Turns a finished request's parts into a value, as Alamofire's
/// `DataResponseSerializerProtocol`.
public protocol DataResponseSerializerProtocol<SerializedObject>: Sendable {
    /// The value produced.
    associatedtype SerializedObject: Sendable

    /// Turns a finished request's outcome into the value (or throws the error that fails it).
    /// - Parameters:
    ///   - request: the request as sent (adapted, before redirects).
    ///   - response: the final response head.
    ///   - data: the body.
    ///   - error: the request's error, if it failed (serializers rethrow it).
    /// - Returns: the value.
    /// - Throws: the request's error, or why serialization failed.
    func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> SerializedObject
}

/// Transforms the body before a serializer reads it.
public protocol DataPreprocessor: Sendable {
    /// Transforms `data`.
    /// - Parameter data: the body.
    /// - Returns: the transformed body.
    /// - Throws: why it cannot be transformed.
    func preprocess(_ data: Data) throws -> Data
}

/// Leaves the body alone.
public struct PassthroughPreprocessor: DataPreprocessor {
    /// Creates the preprocessor.
    public init() {}

    /// Returns `data`.
    /// - Parameter data: the body.
    /// - Returns: `data`.
    public func preprocess(_ data: Data) -> Data { data }
}

/// Strips Google's cross-site script inclusion guard `)]}',\n` from the front of a body.
public struct GoogleXSSIPreprocessor: DataPreprocessor {
    /// Creates the preprocessor.
    public init() {}

    /// Strips the guard when present.
    /// - Parameter data: the body.
    /// - Returns: the body without the guard.
    public func preprocess(_ data: Data) -> Data {
        let prefix = Data(")]}',\n".utf8)
        return data.starts(with: prefix) ? data.dropFirst(prefix.count) : data
    }
}

extension DataPreprocessor where Self == PassthroughPreprocessor {
    /// Leaves the body alone.
    public static var passthrough: PassthroughPreprocessor { PassthroughPreprocessor() }
}

extension DataPreprocessor where Self == GoogleXSSIPreprocessor {
    /// Strips Google's XSSI guard.
    public static var googleXSSI: GoogleXSSIPreprocessor { GoogleXSSIPreprocessor() }
}

/// Turns a finished download's parts into a value, as Alamofire's
/// `DownloadResponseSerializerProtocol`: what `DownloadRequest.response(queue:responseSerializer:)`
/// takes. Every `ResponseSerializer` is one (it reads the file and serializes its bytes); write
/// your own to work on the file without reading it into memory.
public protocol DownloadResponseSerializerProtocol<SerializedObject>: Sendable {
    /// The value produced.
    associatedtype SerializedObject: Sendable

    /// Turns a finished download's outcome into the value (or throws the error that fails it).
    /// - Parameters:
    ///   - request: the request as sent (adapted, before redirects).
    ///   - response: the final response head.
    ///   - fileURL: where the body was written; nil when it went elsewhere or the download
    ///     failed first.
    ///   - error: the request's error, if it failed (serializers rethrow it).
    /// - Returns: the value.
    /// - Throws: the request's error, or why serialization failed.
    func serializeDownload(request: URLRequest?, response: HTTPURLResponse?, fileURL: URL?, error: (any Error)?) throws -> SerializedObject
}

/// A serializer with Alamofire's shared behaviour: a preprocessor and the rules for when an
/// empty body is acceptable (by status code, or by request method). It serializes data
/// responses and downloads alike.
public protocol ResponseSerializer: DataResponseSerializerProtocol & DownloadResponseSerializerProtocol {
    /// Applied to the body first.
    var dataPreprocessor: any DataPreprocessor { get }
    /// Methods whose responses may be empty (default HEAD).
    var emptyRequestMethods: Set<HTTPMethod> { get }
    /// Statuses whose responses may be empty (default 204, 205).
    var emptyResponseCodes: Set<Int> { get }
}

/// The defaults every `ResponseSerializer` starts from.
public enum ResponseSerializerDefaults {
    /// `PassthroughPreprocessor`.
    public static let dataPreprocessor: any DataPreprocessor = PassthroughPreprocessor()
    /// HEAD.
    public static let emptyRequestMethods: Set<HTTPMethod> = [.head]
    /// 204, 205.
    public static let emptyResponseCodes: Set<Int> = [204, 205]
}

extension ResponseSerializer {
    /// `PassthroughPreprocessor`.
    public static var defaultDataPreprocessor: any DataPreprocessor { ResponseSerializerDefaults.dataPreprocessor }
    /// HEAD.
    public static var defaultEmptyRequestMethods: Set<HTTPMethod> { ResponseSerializerDefaults.emptyRequestMethods }
    /// 204, 205.
    public static var defaultEmptyResponseCodes: Set<Int> { ResponseSerializerDefaults.emptyResponseCodes }

    /// `PassthroughPreprocessor`.
    public var dataPreprocessor: any DataPreprocessor { ResponseSerializerDefaults.dataPreprocessor }
    /// HEAD.
    public var emptyRequestMethods: Set<HTTPMethod> { ResponseSerializerDefaults.emptyRequestMethods }
    /// 204, 205.
    public var emptyResponseCodes: Set<Int> { ResponseSerializerDefaults.emptyResponseCodes }

    /// Whether the request's method allows an empty body (nil when unknown).
    /// - Parameter request: the request.
    /// - Returns: the answer.
    public func requestAllowsEmptyResponseData(_ request: URLRequest?) -> Bool? {
        request.map { emptyRequestMethods.contains($0.method ?? .get) }
    }

    /// Whether the status allows an empty body (nil when unknown).
    /// - Parameter response: the response.
    /// - Returns: the answer.
    public func responseAllowsEmptyResponseData(_ response: HTTPURLResponse?) -> Bool? {
        response.map { emptyResponseCodes.contains($0.status.code) }
    }

    /// Whether an empty body is acceptable here.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    /// - Returns: the answer.
    public func emptyResponseAllowed(request: URLRequest?, response: HTTPURLResponse?) -> Bool {
        requestAllowsEmptyResponseData(request) == true || responseAllowsEmptyResponseData(response) == true
    }

    /// Whether an empty body is acceptable here (Alamofire's spelling).
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    /// - Returns: the answer.
    public func emptyResponseAllowed(forRequest request: URLRequest?, response: HTTPURLResponse?) -> Bool {
        emptyResponseAllowed(request: request, response: response)
    }

    /// Reads the downloaded file into memory and serializes its bytes. The read is bounded:
    /// a file larger than the downloading session's `maxInMemoryBodyBytes` (outside a download,
    /// `SessionConfiguration.default`'s) fails with `.customSerializationFailed` saying so.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    ///   - fileURL: the file.
    ///   - error: the request's error.
    /// - Returns: what `serialize(request:response:data:error:)` makes of the file's bytes.
    /// - Throws: the request's error, `.inputFileNil`, `.inputFileReadFailed(at:)`, or the
    ///   serializer's error.
    public func serializeDownload(request: URLRequest?, response: HTTPURLResponse?, fileURL: URL?, error: (any Error)?) throws
        -> SerializedObject
    {
        if let error { throw error }
        guard let fileURL else { throw TinyFireError.responseSerializationFailed(reason: .inputFileNil) }
        let data = try DownloadRequest.readDownloadedFile(fileURL, limit: DownloadRequest.serializationReadLimit)
        return try serialize(request: request, response: response, data: data, error: error)
    }
}

/// The downloaded file's URL, as Alamofire's `URLResponseSerializer`: nothing is read.
public struct URLResponseSerializer: DownloadResponseSerializerProtocol {
    /// Creates the serializer.
    public init() {}

    /// The file's URL.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    ///   - fileURL: the file.
    ///   - error: the request's error.
    /// - Returns: `fileURL`.
    /// - Throws: the request's error, or `.inputFileNil`.
    public func serializeDownload(request: URLRequest?, response: HTTPURLResponse?, fileURL: URL?, error: (any Error)?) throws -> URL {
        if let error { throw error }
        guard let fileURL else { throw TinyFireError.responseSerializationFailed(reason: .inputFileNil) }
        return fileURL
    }
}

extension DownloadResponseSerializerProtocol where Self == DataResponseSerializer {
    /// A `DataResponseSerializer` with the defaults, for downloads.
    public static var data: DataResponseSerializer { DataResponseSerializer() }
}

extension DownloadResponseSerializerProtocol where Self == StringResponseSerializer {
    /// A `StringResponseSerializer` with the defaults, for downloads.
    public static var string: StringResponseSerializer { StringResponseSerializer() }
}

extension DownloadResponseSerializerProtocol where Self == URLResponseSerializer {
    /// The file's URL.
    public static var url: URLResponseSerializer { URLResponseSerializer() }
}

/// A type with a value for empty responses (204, HEAD), as Alamofire's `EmptyResponse`.
public protocol EmptyResponse {
    /// The value used when the body is empty.
    /// - Returns: the empty value.
    static func emptyValue() -> Self
}

/// A `Decodable` stand-in for "no body", as Alamofire's `Empty`.
public struct Empty: Codable, Sendable, Equatable {
    /// The value.
    public static let value = Empty()
}

extension Empty: EmptyResponse {
    /// `Empty.value`.
    /// - Returns: `Empty.value`.
    public static func emptyValue() -> Empty { value }
}

/// Decodes a value from bytes (`JSONDecoder` and `PropertyListDecoder` are ones).
public protocol DataDecoder: Sendable {
    /// Decodes a value of `type` from `data`.
    /// - Parameters:
    ///   - type: the type.
    ///   - data: the bytes.
    /// - Returns: the value.
    /// - Throws: why it cannot be decoded.
    func decode<D: Decodable>(_ type: D.Type, from data: Data) throws -> D
}

extension JSONDecoder: DataDecoder {}

/// The body as `Data`; an empty body is an error unless the method or status allows it.
public struct DataResponseSerializer: ResponseSerializer {
    /// The value produced.
    public typealias SerializedObject = Data

    /// The preprocessor.
    public let dataPreprocessor: any DataPreprocessor
    /// Statuses allowed to be empty.
    public let emptyResponseCodes: Set<Int>
    /// Methods allowed to be empty.
    public let emptyRequestMethods: Set<HTTPMethod>

    /// Creates the serializer.
    /// - Parameters:
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    public init(
        dataPreprocessor: any DataPreprocessor = DataResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = DataResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DataResponseSerializer.defaultEmptyRequestMethods
    ) {
        self.dataPreprocessor = dataPreprocessor
        self.emptyResponseCodes = emptyResponseCodes
        self.emptyRequestMethods = emptyRequestMethods
    }

    /// The (preprocessed) body.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    ///   - data: the body.
    ///   - error: the request's error.
    /// - Returns: the body.
    /// - Throws: the request's error, or `.inputDataNilOrZeroLength`.
    public func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> Data {
        if let error { throw error }
        guard var data, !data.isEmpty else {
            guard emptyResponseAllowed(request: request, response: response) else {
                throw TinyFireError.responseSerializationFailed(reason: .inputDataNilOrZeroLength)
            }
            return Data()
        }
        data = try dataPreprocessor.preprocess(data)
        return data
    }
}

/// The body as a `String`, in the given encoding, else the response's charset, else ISO-8859-1.
public struct StringResponseSerializer: ResponseSerializer {
    /// The value produced.
    public typealias SerializedObject = String

    /// The preprocessor.
    public let dataPreprocessor: any DataPreprocessor
    /// A fixed encoding, or nil to use the response's charset.
    public let encoding: String.Encoding?
    /// Statuses allowed to be empty.
    public let emptyResponseCodes: Set<Int>
    /// Methods allowed to be empty.
    public let emptyRequestMethods: Set<HTTPMethod>

    /// Creates the serializer.
    /// - Parameters:
    ///   - dataPreprocessor: default passthrough.
    ///   - encoding: default nil (the response's charset).
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    public init(
        dataPreprocessor: any DataPreprocessor = StringResponseSerializer.defaultDataPreprocessor,
        encoding: String.Encoding? = nil,
        emptyResponseCodes: Set<Int> = StringResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = StringResponseSerializer.defaultEmptyRequestMethods
    ) {
        self.dataPreprocessor = dataPreprocessor
        self.encoding = encoding
        self.emptyResponseCodes = emptyResponseCodes
        self.emptyRequestMethods = emptyRequestMethods
    }

    /// The body as text.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    ///   - data: the body.
    ///   - error: the request's error.
    /// - Returns: the text.
    /// - Throws: the request's error, `.inputDataNilOrZeroLength`, or
    ///   `.stringSerializationFailed` when the bytes are not valid in the encoding.
    public func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> String {
        if let error { throw error }
        guard var data, !data.isEmpty else {
            guard emptyResponseAllowed(request: request, response: response) else {
                throw TinyFireError.responseSerializationFailed(reason: .inputDataNilOrZeroLength)
            }
            return ""
        }
        data = try dataPreprocessor.preprocess(data)
        let chosen =
            encoding ?? response.flatMap { TextEncoding.encoding(ofContentType: $0.headerFields[values: .contentType].first) } ?? .isoLatin1
        guard let text = TextEncoding.decode(data, as: chosen) else {
            throw TinyFireError.responseSerializationFailed(reason: .stringSerializationFailed(encoding: chosen))
        }
        return text
    }
}

/// A `Decodable` value from the body, with a `DataDecoder` (JSON by default). An allowed empty
/// response decodes to `T.emptyValue()` when `T` is `EmptyResponse`.
public struct DecodableResponseSerializer<T: Decodable & Sendable>: ResponseSerializer {
    /// The value produced.
    public typealias SerializedObject = T

    /// The preprocessor.
    public let dataPreprocessor: any DataPreprocessor
    /// The decoder.
    public let decoder: any DataDecoder
    /// Statuses allowed to be empty.
    public let emptyResponseCodes: Set<Int>
    /// Methods allowed to be empty.
    public let emptyRequestMethods: Set<HTTPMethod>

    /// Creates the serializer.
    /// - Parameters:
    ///   - dataPreprocessor: default passthrough.
    ///   - decoder: default `JSONDecoder()`.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    public init(
        dataPreprocessor: any DataPreprocessor = DecodableResponseSerializer.defaultDataPreprocessor,
        decoder: any DataDecoder = JSONDecoder(),
        emptyResponseCodes: Set<Int> = DecodableResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DecodableResponseSerializer.defaultEmptyRequestMethods
    ) {
        self.dataPreprocessor = dataPreprocessor
        self.decoder = decoder
        self.emptyResponseCodes = emptyResponseCodes
        self.emptyRequestMethods = emptyRequestMethods
    }

    /// The decoded value.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    ///   - data: the body.
    ///   - error: the request's error.
    /// - Returns: the value.
    /// - Throws: the request's error, `.inputDataNilOrZeroLength`, `.invalidEmptyResponse`, or
    ///   `.decodingFailed` with the decoder's error.
    public func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> T {
        if let error { throw error }
        guard var data, !data.isEmpty else {
            guard emptyResponseAllowed(request: request, response: response) else {
                throw TinyFireError.responseSerializationFailed(reason: .inputDataNilOrZeroLength)
            }
            guard let emptyType = T.self as? any EmptyResponse.Type, let empty = emptyType.emptyValue() as? T else {
                throw TinyFireError.responseSerializationFailed(reason: .invalidEmptyResponse(type: "\(T.self)"))
            }
            return empty
        }
        data = try dataPreprocessor.preprocess(data)
        do {
            return try decoder.decode(T.self, from: data)
        } catch {
            throw TinyFireError.responseSerializationFailed(reason: .decodingFailed(error: error))
        }
    }
}

extension DataResponseSerializerProtocol where Self == DataResponseSerializer {
    /// A `DataResponseSerializer` with the defaults (`serializingResponse(using: .data)`).
    public static var data: DataResponseSerializer { DataResponseSerializer() }

    /// A `DataResponseSerializer`.
    /// - Parameters:
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the serializer.
    public static func data(
        dataPreprocessor: any DataPreprocessor = DataResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = DataResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DataResponseSerializer.defaultEmptyRequestMethods
    ) -> DataResponseSerializer {
        DataResponseSerializer(
            dataPreprocessor: dataPreprocessor, emptyResponseCodes: emptyResponseCodes, emptyRequestMethods: emptyRequestMethods)
    }
}

extension DataResponseSerializerProtocol where Self == StringResponseSerializer {
    /// A `StringResponseSerializer` with the defaults.
    public static var string: StringResponseSerializer { StringResponseSerializer() }

    /// A `StringResponseSerializer`.
    /// - Parameters:
    ///   - dataPreprocessor: default passthrough.
    ///   - encoding: default the response's charset.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the serializer.
    public static func string(
        dataPreprocessor: any DataPreprocessor = StringResponseSerializer.defaultDataPreprocessor,
        encoding: String.Encoding? = nil,
        emptyResponseCodes: Set<Int> = StringResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = StringResponseSerializer.defaultEmptyRequestMethods
    ) -> StringResponseSerializer {
        StringResponseSerializer(
            dataPreprocessor: dataPreprocessor, encoding: encoding, emptyResponseCodes: emptyResponseCodes,
            emptyRequestMethods: emptyRequestMethods)
    }
}

extension DataResponseSerializerProtocol {
    /// A `DecodableResponseSerializer`.
    /// - Parameters:
    ///   - type: the type.
    ///   - dataPreprocessor: default passthrough.
    ///   - decoder: default `JSONDecoder()`.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    /// - Returns: the serializer.
    public static func decodable<T: Decodable & Sendable>(
        of type: T.Type,
        dataPreprocessor: any DataPreprocessor = DecodableResponseSerializer<T>.defaultDataPreprocessor,
        decoder: any DataDecoder = JSONDecoder(),
        emptyResponseCodes: Set<Int> = DecodableResponseSerializer<T>.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = DecodableResponseSerializer<T>.defaultEmptyRequestMethods
    ) -> DecodableResponseSerializer<T> where Self == DecodableResponseSerializer<T> {
        DecodableResponseSerializer<T>(
            dataPreprocessor: dataPreprocessor, decoder: decoder, emptyResponseCodes: emptyResponseCodes,
            emptyRequestMethods: emptyRequestMethods)
    }
}

/// Charset names to encodings, and decoding for the ones FoundationEssentials lacks.
enum TextEncoding {
    /// The encoding named by a Content-Type's `charset` parameter, if TinyFire knows it.
    static func encoding(ofContentType contentType: String?) -> String.Encoding? {
        guard let contentType else { return nil }
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingHTTPWhitespace().lowercased() == "charset" else { continue }
            let name = pair[1].trimmingHTTPWhitespace().filter { $0 != "\"" }.lowercased()
            return encoding(named: name)
        }
        return nil
    }

    static func encoding(named name: String) -> String.Encoding? {
        switch name {
        case "utf-8", "utf8": return .utf8
        case "us-ascii", "ascii": return .ascii
        case "iso-8859-1", "iso8859-1", "latin1", "iso_8859-1", "l1": return .isoLatin1
        case "windows-1252", "cp1252": return .windowsCP1252
        case "utf-16": return .utf16
        case "utf-16le": return .utf16LittleEndian
        case "utf-16be": return .utf16BigEndian
        case "utf-32": return .utf32
        case "utf-32le": return .utf32LittleEndian
        case "utf-32be": return .utf32BigEndian
        default: return nil
        }
    }

    /// Decodes `data`; nil when the bytes are invalid in `encoding` or the encoding is unknown.
    static func decode(_ data: Data, as encoding: String.Encoding) -> String? {
        switch encoding {
        case .isoLatin1:
            return String(String.UnicodeScalarView(data.map { Unicode.Scalar($0) }))
        case .windowsCP1252:
            var scalars = String.UnicodeScalarView()
            for byte in data {
                if (0x80...0x9F).contains(byte) {
                    guard let value = cp1252High[Int(byte - 0x80)], let scalar = Unicode.Scalar(value) else { return nil }
                    scalars.append(scalar)
                } else {
                    scalars.append(Unicode.Scalar(byte))
                }
            }
            return String(scalars)
        case .ascii:
            guard data.allSatisfy({ $0 < 0x80 }) else { return nil }
            return String(decoding: data, as: UTF8.self)
        case .utf8:
            return String(validating: data, as: UTF8.self)
        default:
            return String(data: data, encoding: encoding)
        }
    }

    /// Windows-1252's 0x80–0x9F (nil: undefined).
    private static let cp1252High: [UInt32?] = [
        0x20AC, nil, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, nil, 0x017D, nil,
        nil, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, nil, 0x017E, 0x0178,
    ]
}

/// The body as untyped JSON, as Alamofire's deprecated `JSONResponseSerializer`: objects
/// `[String: any Sendable]`, arrays `[any Sendable]`, whole numbers `Int`, other numbers
/// `Double`, booleans `Bool`, `null` an `Optional<any Sendable>.none`. Read by TinyFire's
/// bounded JSON reader (512 levels; the body is already bounded by `maxInMemoryBodyBytes`). An
/// allowed empty body (204, 205, HEAD) gives `Optional<any Sendable>.none`, where Alamofire
/// gives `NSNull()`.
@available(*, deprecated, message: "Use DecodableResponseSerializer (responseDecodable) instead, as Alamofire 5 advises.")
public struct JSONResponseSerializer: ResponseSerializer {
    /// The value produced.
    public typealias SerializedObject = any Sendable

    /// How the JSON is read, as `JSONSerialization.ReadingOptions`.
    public struct ReadingOptions: OptionSet, Sendable {
        /// The raw bits.
        public let rawValue: UInt
        /// Creates options from bits.
        /// - Parameter rawValue: the bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Accepted for ported code (values are immutable in Swift either way).
        public static let mutableContainers = ReadingOptions(rawValue: 1 << 0)
        /// Accepted for ported code.
        public static let mutableLeaves = ReadingOptions(rawValue: 1 << 1)
        /// A string, number, boolean or null is accepted at the top level.
        public static let fragmentsAllowed = ReadingOptions(rawValue: 1 << 2)
        /// The same as `fragmentsAllowed` (its older name).
        public static let allowFragments = fragmentsAllowed
    }

    /// The preprocessor.
    public let dataPreprocessor: any DataPreprocessor
    /// Statuses allowed to be empty.
    public let emptyResponseCodes: Set<Int>
    /// Methods allowed to be empty.
    public let emptyRequestMethods: Set<HTTPMethod>
    /// How the JSON is read.
    public let options: ReadingOptions

    /// Creates the serializer.
    /// - Parameters:
    ///   - dataPreprocessor: default passthrough.
    ///   - emptyResponseCodes: default 204, 205.
    ///   - emptyRequestMethods: default HEAD.
    ///   - options: default `.allowFragments`, as Alamofire's.
    public init(
        dataPreprocessor: any DataPreprocessor = JSONResponseSerializer.defaultDataPreprocessor,
        emptyResponseCodes: Set<Int> = JSONResponseSerializer.defaultEmptyResponseCodes,
        emptyRequestMethods: Set<HTTPMethod> = JSONResponseSerializer.defaultEmptyRequestMethods, options: ReadingOptions = .allowFragments
    ) {
        self.dataPreprocessor = dataPreprocessor
        self.emptyResponseCodes = emptyResponseCodes
        self.emptyRequestMethods = emptyRequestMethods
        self.options = options
    }

    /// The body as untyped JSON.
    /// - Parameters:
    ///   - request: the request.
    ///   - response: the response.
    ///   - data: the body.
    ///   - error: the request's error.
    /// - Returns: the value.
    /// - Throws: the request's error, `.inputDataNilOrZeroLength`, or
    ///   `.jsonSerializationFailed` with the line, column and what is wrong.
    public func serialize(request: URLRequest?, response: HTTPURLResponse?, data: Data?, error: (any Error)?) throws -> any Sendable {
        if let error { throw error }
        guard var data, !data.isEmpty else {
            guard emptyResponseAllowed(request: request, response: response) else {
                throw TinyFireError.responseSerializationFailed(reason: .inputDataNilOrZeroLength)
            }
            return Optional<any Sendable>.none as any Sendable
        }
        data = try dataPreprocessor.preprocess(data)
        do {
            return try JSONObject.read(data, fragmentsAllowed: options.contains(.fragmentsAllowed))
        } catch {
            throw TinyFireError.responseSerializationFailed(reason: .jsonSerializationFailed(error: error))
        }
    }
}
