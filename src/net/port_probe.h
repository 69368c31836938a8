// Whether a TCP port is taken on an address of this machine: the head's probe for the ports it
// hands to workers (controller::ControllerOptions::port_taken), so that two clusters whose hosts
// share this machine never give their workers the same MASTER_PORT.
//
// Stateless; safe to call from any thread. Costs one socket, a bind and a close (microseconds).
#pragma once

#include <string>

namespace tessera::net {

// True when binding `address`:`port` fails because the port is in use (by a listener on that
// address or on the wildcard address, or a connection still bound to it). False when the bind
// succeeds (the socket is closed at once) and when nothing can be told from here: `address` is
// not an IPv4 or IPv6 literal, or not an address of this machine (another host's ports), or the
// bind fails for another reason.
bool PortTakenHere(const std::string& address, int port);

}  // namespace tessera::net
