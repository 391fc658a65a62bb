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

group.wait()

// Using Alamofire with Swift Concurrency
let done = DispatchSemaphore(value: 0)
Task.detached {
    defer { done.signal() }
    do {
        let value = try await AF.request("\(host)/get").serializingDecodable(DecodableType.self).value
        print("Swift concurrency: \(value.url)")
    } catch {
        print("Swift concurrency failed: \(error)")
    }
}
done.wait()
