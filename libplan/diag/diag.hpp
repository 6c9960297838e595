#pragma once
// Diagnostics: errors as values at module boundaries.
//
// A Diagnostic names where a problem is (file, 1-based line and column, field path such as
// `subclusters[1].inter_node.bandwidth`) and what was expected, in a sentence for people.
// Parsers collect every problem they find rather than stopping at the first one, so a user
// fixes a file in one round. Result<T> holds either a value or at least one Diagnostic.
// A Diagnostic has a kind, so that whoever gathers the failures of many processes (run-local,
// an agent, submit) tells a cause from its consequences without reading the sentence.
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace het {

enum class ErrorKind {
  invalid_input,  // the inputs are wrong: a file, an option, a request (the default)
  unsupported,    // valid, but this build, backend or node cannot run it
  peer_lost,      // another rank or process went away or fell silent: a consequence
  hung,           // a process made no progress within its bound (the watchdog's verdict)
  killed,         // a process ended by a signal nobody on our side sent, or a node vanished or stopped
  aborted,        // stopped on request: an abort, a lease, another node's failure
  internal,       // a failure of ours: a corrupt frame, a device error, a broken invariant
};

// "invalid input", "peer lost", ...
const char* to_string(ErrorKind kind);

struct Diagnostic {
  std::string file;     // empty when the input did not come from a file
  int line = 0;         // 1-based; 0 when unknown
  int column = 0;       // 1-based; 0 when unknown
  std::string path;     // field path; empty for whole-file problems
  std::string message;  // what is wrong and what was expected
  ErrorKind kind = ErrorKind::invalid_input;

  // "file:line:column: path: message", leaving out the parts that are unknown.
  std::string to_string() const;
};

using Diagnostics = std::vector<Diagnostic>;

// A failure that is not about a place in a file: `message` of `kind`.
inline Diagnostic failure(ErrorKind kind, std::string message, std::string path = "") {
  return Diagnostic{"", 0, 0, std::move(path), std::move(message), kind};
}

// Every diagnostic on its own line, in order.
std::string to_string(const Diagnostics& diagnostics);

// The value of an operation that has nothing to return but may fail: Result<Done>.
struct Done {};

template <class T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Diagnostics errors) : state_(std::move(errors)) {}  // NOLINT: must hold >= 1
  Result(Diagnostic error) : state_(Diagnostics{std::move(error)}) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // Precondition: ok().
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // Precondition: !ok().
  const Diagnostics& errors() const { return std::get<1>(state_); }

 private:
  std::variant<T, Diagnostics> state_;
};

}  // namespace het
