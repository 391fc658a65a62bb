// Alamofire 4.x-style calls from its README and Usage documents, which Alamofire 5 still ships
// (deprecated): untyped `Parameters` with a `ParameterEncoding`, and `responseJSON`. Only the
// import, `AF` for the 4.x module-level `Alamofire.request`, `response.value` for 4.x's
// `response.result.value`, and the host differ.
//
//   swift run alamofire-4x-example http://127.0.0.1:8080

import Dispatch
import TinyFire

let host = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "http://127.0.0.1:8080"
let group = DispatchGroup()

// Response JSON Handler
group.enter()
AF.request("\(host)/get").responseJSON { response in
    print("Request: \(String(describing: response.request))")  // original url request
    print("Response: \(String(describing: response.response))")  // http url response
    print("Result: \(response.result)")  // response serialization result

    if let json = response.value {
        print("JSON: \(json)")  // serialized json response
    }
    group.leave()
}

// Parameter Encoding
let parameters: Parameters = [
    "foo": "bar",
    "baz": ["a", 1],
    "qux": [
        "x": 1,
        "y": 2,
        "z": 3,
    ],
]

// JSON Encoding
group.enter()
AF.request("\(host)/post", method: .post, parameters: parameters, encoding: JSONEncoding.default).responseJSON { response in
    if let json = response.value as? [String: Any], let sent = json["json"] as? [String: Any] {
        print(
            "JSONEncoding sent: foo=\(sent["foo"] ?? "nil") baz=\(sent["baz"] ?? "nil") qux.z=\((sent["qux"] as? [String: Any])?["z"] ?? "nil")"
        )
    } else {
        print("JSONEncoding failed: \(response)")
    }
    group.leave()
}

// URL Encoding: the query for GET (`URLEncoding.default`), or always the query
group.enter()
AF.request("\(host)/get", parameters: parameters).responseJSON { response in
    let url = (response.value as? [String: Any])?["url"] as? String
    print("URLEncoding.default URL: \(url ?? "failed")")
    group.leave()
}

group.enter()
AF.request("\(host)/post", method: .post, parameters: ["foo": "bar"], encoding: URLEncoding(destination: .queryString))
    .responseJSON { response in
        let args = (response.value as? [String: Any])?["args"] as? [String: Any]
        print("URLEncoding.queryString args: \(args?["foo"] ?? "failed")")
        group.leave()
    }

// A form body for POST, with a [String: Any] built at run time
var form: [String: Any] = ["name": "TinyFire"]
form["enabled"] = true
group.enter()
AF.request("\(host)/post", method: .post, parameters: form, encoding: URLEncoding.httpBody).responseJSON { response in
    let sent = (response.value as? [String: Any])?["form"] as? [String: Any]
    print("URLEncoding.httpBody form: name=\(sent?["name"] ?? "failed") enabled=\(sent?["enabled"] ?? "failed")")
    group.leave()
}

group.wait()
