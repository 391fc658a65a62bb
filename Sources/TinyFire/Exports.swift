// TinyFire's users see the core's public types (ResponseParser, HTTPMethod, …) as TinyFire's:
// the split into two modules is how the library is built, not something its users import.
@_exported import TinyFireCore
