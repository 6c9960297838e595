#pragma once
// The root cause of a failed job (issue 18 item 6). When one process of a job fails, the
// others fail after it — they lose their peer, or are stopped — so a launcher (run-local, a
// node agent, submit) sees many failures and must name the one that caused the rest. It does
// so by their kinds (diag.hpp's ErrorKind), never by their text:
//  * a worker's exit status says the kind of its error (exit_status_of), and its supervisor
//    reads it back (kind_of_exit), a signal it did not send being `killed`;
//  * of all the failures, the root cause is the first of the highest precedence:
//      killed, hung                          a process died or stopped: the likeliest cause
//      internal, invalid_input, unsupported  a process's own error
//      peer_lost                             lost a peer: the consequence of another's failure
//      aborted                               stopped because something else failed
#include <cstddef>
#include <vector>

#include "diag/diag.hpp"

namespace het::launch {

// The exit status of a worker whose run ended with an error of `kind`: internal 1,
// invalid_input 2, unsupported 3, peer_lost 4, hung 5, killed 6, aborted 7.
int exit_status_of(ErrorKind kind);
// The kind of a worker's end: a signal is `killed`; an exit status as exit_status_of gives it,
// and any other non-zero status `internal`. Precondition: the worker failed (signal != 0 or
// exit_status != 0).
ErrorKind kind_of_exit(int exit_status, int signal);

// How likely a failure of this kind is the cause of the others (higher: likelier).
int precedence(ErrorKind kind);
// The index of the root cause among `failures` (in the order they were seen): the first of
// the highest precedence. Precondition: !failures.empty().
std::size_t root_cause(const std::vector<ErrorKind>& failures);

}  // namespace het::launch
