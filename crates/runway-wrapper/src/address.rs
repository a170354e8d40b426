//! Where the wrapper's gRPC API is served: `tcp://HOST:PORT` or `unix:///PATH`, as upstream's
//! `--grpc-listen` takes it.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio::net::{TcpListener, UnixListener};

/// Upstream's default `--grpc-listen`.
pub const DEFAULT_LISTEN: &str = "tcp://localhost:7777";

const EXPECTED: &str = "expected tcp://HOST:PORT (such as tcp://localhost:7777) \
                        or unix:///PATH (such as unix:///run/runway-wrapper.sock)";

/// A wrapper's address, to listen on or to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddress {
    /// `tcp://HOST:PORT`; the host is a name or an IP address (IPv6 in brackets, kept here).
    Tcp { host: String, port: u16 },
    /// `unix:///PATH` (or `unix:/PATH`, which upstream's URL parser also reads): an absolute path.
    Unix(PathBuf),
}

/// Why a text is not a wrapper address. The message names the text and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address {text:?}: {reason}; {EXPECTED}")]
pub struct AddressError {
    pub text: String,
    pub reason: &'static str,
}

impl FromStr for ListenAddress {
    type Err = AddressError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason| AddressError {
            text: text.to_owned(),
            reason,
        };
        if let Some(rest) = text.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| error("missing the port"))?;
            if host.is_empty() {
                return Err(error("missing the host"));
            }
            let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
            let valid_host = match bare {
                Some(ip) => ip.parse::<std::net::Ipv6Addr>().is_ok(),
                None => !host.contains(['/', '[', ']', ':', '@', '?', '#', ' ']),
            };
            if !valid_host {
                return Err(error("the host is not a name or an IP address"));
            }
            let port = port
                .parse::<u16>()
                .map_err(|_| error("the port is not a number from 0 to 65535"))?;
            return Ok(Self::Tcp {
                host: host.to_owned(),
                port,
            });
        }
        if let Some(rest) = text.strip_prefix("unix:") {
            // `unix:///run/x.sock` has an empty host; `unix:/run/x.sock` has no host at all.
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(error("the socket path must be absolute"));
            }
            if path.len() == 1 {
                return Err(error("missing the socket path"));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        match text.split_once("://") {
            Some(_) => Err(error("unsupported scheme")),
            None => Err(error("missing the scheme")),
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            Self::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// A bound listener, and what must be cleaned up when it is dropped.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, SocketFile),
}

impl Listener {
    /// What a person reads in the logs: the address actually bound.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Tcp(listener) => match listener.local_addr() {
                Ok(addr) => format!("tcp://{addr}"),
                Err(_) => "tcp://(unknown)".to_owned(),
            },
            Self::Unix(_, file) => format!("unix://{}", file.path.display()),
        }
    }

    /// True when anyone on the network may reach it: TCP on an address other than loopback.
    pub(crate) fn is_exposed(&self) -> bool {
        match self {
            Self::Tcp(listener) => listener
                .local_addr()
                .is_ok_and(|addr| !addr.ip().is_loopback()),
            Self::Unix(..) => false,
        }
    }
}

/// Why the address could not be listened on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BindError {
    #[error("cannot resolve {address}")]
    Resolve {
        address: ListenAddress,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {address}")]
    Listen {
        address: ListenAddress,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {address}: another process is listening on that socket")]
    InUse { address: ListenAddress },
    #[error("cannot listen on {address}: {path} exists and is not a socket")]
    NotASocket {
        address: ListenAddress,
        path: String,
    },
}

impl ListenAddress {
    /// Binds the address. A TCP host name binds its first IPv4 address (else its first), as Go's
    /// `net.Listen` does for `localhost`. A unix socket left behind by a process that is gone is
    /// replaced; the socket file is removed when the listener's [`SocketFile`] is dropped.
    pub(crate) async fn bind(&self) -> Result<Listener, BindError> {
        match self {
            Self::Tcp { host, port } => {
                let bare = host.trim_start_matches('[').trim_end_matches(']');
                let resolve = |source| BindError::Resolve {
                    address: self.clone(),
                    source,
                };
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, *port))
                    .await
                    .map_err(resolve)?
                    .collect();
                let addr = addrs
                    .iter()
                    .find(|addr| addr.is_ipv4())
                    .or_else(|| addrs.first())
                    .copied()
                    .ok_or_else(|| resolve(io::Error::other("the name has no address")))?;
                let listener =
                    TcpListener::bind(addr)
                        .await
                        .map_err(|source| BindError::Listen {
                            address: self.clone(),
                            source,
                        })?;
                Ok(Listener::Tcp(listener))
            }
            Self::Unix(path) => {
                self.clear_stale_socket(path)?;
                let listener = UnixListener::bind(path).map_err(|source| BindError::Listen {
                    address: self.clone(),
                    source,
                })?;
                let identity = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
                Ok(Listener::Unix(
                    listener,
                    SocketFile {
                        path: path.clone(),
                        identity,
                    },
                ))
            }
        }
    }

    fn clear_stale_socket(&self, path: &Path) -> Result<(), BindError> {
        let Ok(metadata) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        if !metadata.file_type().is_socket() {
            return Err(BindError::NotASocket {
                address: self.clone(),
                path: path.display().to_string(),
            });
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => Err(BindError::InUse {
                address: self.clone(),
            }),
            Err(_) => {
                crate::log::info(format_args!(
                    "replacing the stale socket {}",
                    path.display()
                ));
                std::fs::remove_file(path).map_err(|source| BindError::Listen {
                    address: self.clone(),
                    source,
                })
            }
        }
    }
}

/// A unix socket file this process created; dropping it removes the file if it is still ours.
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    identity: Option<(u64, u64)>,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| Some((m.dev(), m.ino())) == self.identity);
        if ours && let Err(error) = std::fs::remove_file(&self.path) {
            crate::log::warn(format_args!(
                "cannot remove {}: {error}",
                self.path.display()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_unix_addresses() {
        let tcp = |host: &str, port| ListenAddress::Tcp {
            host: host.to_owned(),
            port,
        };
        for (text, expected) in [
            ("tcp://localhost:7777", tcp("localhost", 7777)),
            ("tcp://127.0.0.1:0", tcp("127.0.0.1", 0)),
            ("tcp://[::1]:7777", tcp("[::1]", 7777)),
            ("tcp://0.0.0.0:7777", tcp("0.0.0.0", 7777)),
            (
                "unix:///run/wrapper.sock",
                ListenAddress::Unix("/run/wrapper.sock".into()),
            ),
            (
                "unix:/run/wrapper.sock",
                ListenAddress::Unix("/run/wrapper.sock".into()),
            ),
        ] {
            assert_eq!(
                text.parse::<ListenAddress>(),
                Ok(expected.clone()),
                "{text}"
            );
            if text != "unix:/run/wrapper.sock" {
                assert_eq!(expected.to_string(), text);
            }
        }
        assert_eq!(
            DEFAULT_LISTEN.parse::<ListenAddress>(),
            Ok(tcp("localhost", 7777))
        );
    }

    #[test]
    fn bad_addresses_say_what_was_expected() {
        for (text, reason) in [
            ("", "missing the scheme"),
            ("localhost:7777", "missing the scheme"),
            ("udp://127.0.0.1:1234", "unsupported scheme"),
            ("tcp://localhost", "missing the port"),
            ("tcp://:7777", "missing the host"),
            ("tcp://localhost:http", "the port is not a number"),
            ("tcp://localhost:70000", "the port is not a number"),
            ("tcp://[::1:7777", "the host is not"),
            ("tcp://::1:7777", "the host is not"),
            ("tcp://host/path:1", "the host is not"),
            ("unix://relative.sock", "must be absolute"),
            ("unix:relative.sock", "must be absolute"),
            ("unix:///", "missing the socket path"),
        ] {
            let error = text.parse::<ListenAddress>().expect_err(text).to_string();
            assert!(error.contains(reason), "{text:?}: {error}");
            assert!(error.contains(&format!("{text:?}")), "{text:?}: {error}");
            assert!(
                error.contains("expected tcp://HOST:PORT"),
                "{text:?}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sock");
        let address = ListenAddress::Unix(path.clone());

        // Stale: bound once and left behind.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let listener = address.bind().await.unwrap();

        // Live: refused.
        let error = address.bind().await.unwrap_err().to_string();
        assert!(error.contains("another process is listening"), "{error}");

        // Dropping the listener removes the file.
        drop(listener);
        assert!(!path.exists());

        // Not a socket: refused, and left alone.
        std::fs::write(&path, "data").unwrap();
        let error = address.bind().await.unwrap_err().to_string();
        assert!(error.contains("exists and is not a socket"), "{error}");
        assert!(path.exists());
    }

    #[tokio::test]
    async fn loopback_is_not_exposed() {
        let address: ListenAddress = "tcp://localhost:0".parse().unwrap();
        let listener = address.bind().await.unwrap();
        assert!(!listener.is_exposed());
        assert!(
            listener.describe().starts_with("tcp://127.0.0.1:"),
            "{}",
            listener.describe()
        );
    }
}
