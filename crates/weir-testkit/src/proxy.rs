//! A TCP proxy on `127.0.0.1:0` whose link to the server can be cut and restored: while cut,
//! every open connection is shut and new ones are closed as soon as they are accepted, as a
//! network partition (or a server restart) looks to a client; restored, it forwards again. A
//! client that must survive losing its server (the dashboard's live connection) is pointed at it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The proxy; it lives as long as the test's process (its threads are not joined).
pub struct CuttableProxy {
    address: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    cut: AtomicBool,
    /// Both ends of every forwarded connection, to shut them when the link is cut.
    open: Mutex<Vec<TcpStream>>,
}

impl CuttableProxy {
    /// Forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<CuttableProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cut: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if accepting.cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                accepting.forward(client, server);
            }
        });
        Ok(CuttableProxy { address, shared })
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://ADDRESS`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Shuts every open connection and closes new ones until [`CuttableProxy::restore`].
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        let open = std::mem::take(
            &mut *self
                .shared
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for stream in open {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Shared {
    /// Copies bytes both ways on threads of their own, keeping both ends to shut them on a cut.
    fn forward(&self, client: TcpStream, server: TcpStream) {
        let ends = [client.try_clone(), server.try_clone()];
        let [Ok(client_end), Ok(server_end)] = ends else {
            return;
        };
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend([client_end, server_end]);
        // A cut that came between the accept and the line above did not see these ends.
        if self.cut.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone())
        else {
            return;
        };
        std::thread::spawn(move || copy(client_reader, server));
        std::thread::spawn(move || copy(server_reader, client));
    }
}

/// Copies `from` into `to` until either ends, then shuts both.
fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 64];
                    while let Ok(read @ 1..) = stream.read(&mut buffer) {
                        if stream.write_all(&buffer[..read]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        address
    }

    fn echoes(stream: &mut TcpStream) -> bool {
        stream
            .set_read_timeout(Some(crate::wait::DEADLINE))
            .unwrap();
        let mut answer = [0u8; 4];
        stream.write_all(b"ping").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"ping"
    }

    #[test]
    fn a_cut_ends_open_connections_refuses_new_ones_and_a_restore_forwards_again() {
        let proxy = CuttableProxy::start(echo_server()).unwrap();
        let mut before = TcpStream::connect(proxy.address()).unwrap();
        assert!(echoes(&mut before));
        proxy.cut();
        assert!(!echoes(&mut before), "an open connection survived the cut");
        let mut during = TcpStream::connect(proxy.address()).unwrap();
        assert!(
            !echoes(&mut during),
            "a new connection was forwarded while cut"
        );
        proxy.restore();
        let mut after = TcpStream::connect(proxy.address()).unwrap();
        assert!(echoes(&mut after));
    }
}
