//! What khai's HTTP servers (metrics and probes, webhooks, the console) share to survive hostile
//! load: an accept loop that backs off and says why when accepting fails ([`Accept`]), a cap on
//! open connections that closes the oldest idle one to make room for a new one ([`Slots`]), and
//! the connection loop of the plain HTTP/1.1 ones ([`serve_plain`]), and binding a listener
//! with the address it bound logged as structured fields ([`listen`]).
//!
//! Both servers also bound how long a client may take to send request headers and how long a
//! kept-alive connection may stay idle (hyper's header-read timer covers both), so a slow or
//! silent client holds a slot for seconds, not forever. State lives as long as its server.

mod accept;
mod listen;
mod plain;
mod slots;

pub(crate) use accept::Accept;
pub(crate) use accept::Throttle;
pub(crate) use listen::listen;
pub(crate) use plain::serve as serve_plain;
pub(crate) use slots::{Guarded, Slot, Slots};
