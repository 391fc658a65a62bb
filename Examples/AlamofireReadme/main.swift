// Alamofire's README and Usage snippets, ported to TinyFire: only the import and the host
// differ (Alamofire's examples talk to https://httpbin.org; pass a local httpbin instead).
//
//   swift run alamofire-readme-example http://127.0.0.1:8080
//
// The DispatchGroup and the semaphore are scaffolding for a command-line program (the
// snippets come from apps with a run loop); the snippets themselves are unchanged.

import Dispatch
import TinyFire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

let host = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "http://127.0.0.1:8080"
let group = DispatchGroup()

// Making Requests
group.enter()
AF.request("\(host)/get").response { response in
    debugPrint(response)
    group.leave()
}

// Request Parameters and Parameter Encoders
struct Login: Encodable {
    let email: String
    let password: String
}

let login = Login(email: "test@test.test", password: "testPassword")

group.enter()
AF.request("\(host)/post",
           method: .post,
           parameters: login,
           encoder: JSONParameterEncoder.default).response { response in
    debugPrint(response)
    group.leave()
}

// Response Validation and Decodable handling
struct DecodableType: Decodable { let url: String }

group.enter()
AF.request("\(host)/get")
    .validate(statusCode: 200..<300)
    .validate(contentType: ["application/json"])
    .responseDecodable(of: DecodableType.self) { response in
        switch response.result {
        case .success:
            print("Validation Successful")
        case let .failure(error):
            print(error)
        }
        group.leave()
    }

// HTTP Headers
let headers: HTTPHeaders = [
    .authorization(username: "Username", password: "Password"),
    .accept("application/json")
]

group.enter()
AF.request("\(host)/headers", headers: headers).responseDecodable(of: [String: [String: String]].self) { response in
    debugPrint(response)
    group.leave()
}

// cURL Command Output
group.enter()
AF.request("\(host)/get")
    .cURLDescription { description in
        print(description)
    }
    .responseDecodable(of: DecodableType.self) { response in
        debugPrint(response.metrics as Any)
        group.leave()
    }

// HTTPHeaders is a Collection of HTTPHeader
print("Headers: \(headers.count), first \(headers[headers.startIndex].name)")
for header in headers.sorted() { print("  \(header.name)") }

// Adding EventMonitors (Advanced Usage), with a TinyFire event for URLSession's task one
let monitor = ClosureEventMonitor()
monitor.requestDidFinish = { request in
    print("Monitor: finished \(request.request?.url?.absoluteString ?? "")")
}
let monitoredSession = Session(eventMonitors: [monitor])
group.enter()
monitoredSession.request("\(host)/get").response { _ in group.leave() }

// onHTTPResponse: the response, then control over the request
group.enter()
AF.request("\(host)/get")
    .onHTTPResponse { response in
        print("onHTTPResponse: \(response.statusCode)")
    }
    .response { _ in group.leave() }

group.enter()
AF.request("\(host)/get")
    .onHTTPResponse { response, completionHandler in
        print(response.status)
        completionHandler(.allow)
    }
    .response { response in
        print("allowed: \(response.error == nil)")
        group.leave()
    }

group.enter()
AF.request("\(host)/get")
    .onHTTPResponse { response, completionHandler in
        completionHandler(.cancel)
    }
    .response { response in
        print("cancelled: \(response.error?.isExplicitlyCancelledError == true)")
        group.leave()
    }

// Download File Destination
let destination: DownloadRequest.Destination = { _, _ in
    let fileURL = FileManager.default.temporaryDirectory.appendingPathComponent("alamofire-example/image.png")
    return (fileURL, [.removePreviousFile, .createIntermediateDirectories])
}

group.enter()
AF.download("\(host)/image/png", to: destination).response { response in
    debugPrint(response)
    if response.error == nil, let imagePath = response.fileURL?.path {
        print("Downloaded image: \(imagePath)")
    }
    group.leave()
}

// Downloads with parameters, as requests
group.enter()
let jsonDestination: DownloadRequest.Destination = { _, _ in
    (FileManager.default.temporaryDirectory.appendingPathComponent("alamofire-example/get.json"),
     [.removePreviousFile, .createIntermediateDirectories])
}
AF.download("\(host)/get", parameters: ["foo": "bar"], to: jsonDestination).responseDecodable(of: DecodableType.self) { response in
    print("Download with parameters: \(response.value?.url ?? "failed: \(String(describing: response.error))")")
    group.leave()
}

// Streaming with a DataStreamSerializer
group.enter()
AF.streamRequest("\(host)/stream/2").responseStream(using: DecodableStreamSerializer<DecodableType>(decoder: JSONDecoder())) { stream in
    switch stream.event {
    case let .stream(result):
        switch result {
        case let .success(value): print("Streamed: \(value.url)")
        case let .failure(error): print("Stream failed: \(error)")
        }
    case let .complete(completion):
        print("Stream complete: \(completion.error.map { "failed: \($0)" } ?? "true")")
        group.leave()
    }
}

group.wait()

// Using Alamofire with Swift Concurrency
let done = DispatchSemaphore(value: 0)
Task.detached {
    defer { done.signal() }
    do {
        let value = try await AF.request("\(host)/get").serializingDecodable(DecodableType.self).value
        print("Swift concurrency: \(value.url)")

        // DownloadRequest Support
        let url = try await AF.download("\(host)/bytes/64").serializingDownloadedFileURL().value
        print("Downloaded to a file: \(url.lastPathComponent.isEmpty ? "failed" : "yes")")

        // DataStreamRequest Support
        let streamTask = AF.streamRequest("\(host)/stream/3").streamTask()
        var lines = 0
        for await stream in streamTask.streamingDecodables(DecodableType.self) {
            if stream.value != nil { lines += 1 }
        }
        print("Stream task decoded \(lines) lines")

        let kept = AF.streamRequest("\(host)/stream/3")
        for await data in kept.streamTask().streamingData(automaticallyCancelling: false) {
            if data.value != nil { break }  // The stream ends; the request is not cancelled.
        }
        print("Left the loop, request cancelled: \(kept.isCancelled)")
    } catch {
        print("Swift concurrency failed: \(error)")
    }
}
done.wait()
