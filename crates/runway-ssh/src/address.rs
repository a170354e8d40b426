//! SSH addresses (`host:port`) and wrapper addresses (`unix:///path`, `tcp://host:port`).

use std::fmt;
use std::path::PathBuf;

use crate::error::SshError;

/// Where the wrapper listens, on the manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A unix socket, reached with a `direct-streamlocal@openssh.com` channel.
    Unix(PathBuf),
    /// A TCP port, reached with a `direct-tcpip` channel (the host as the manager resolves it).
    Tcp { host: String, port: u16 },
}

impl Destination {
    /// Parses a `wrapper_address`: `unix:///absolute/path` or `tcp://host:port`.
    pub fn parse(wrapper_address: &str) -> Result<Self, SshError> {
        let error = |reason: &str| SshError::Address {
            address: wrapper_address.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = wrapper_address.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(error(
                    "a unix socket needs an absolute path, as in unix:///run/wrapper.sock",
                ));
            }
            Ok(Destination::Unix(PathBuf::from(path)))
        } else if let Some(rest) = wrapper_address.strip_prefix("tcp://") {
            let rest = rest.trim_end_matches('/');
            let Some((host, port)) = rest.rsplit_once(':') else {
                return Err(error(
                    "a tcp address needs a port, as in tcp://127.0.0.1:7777",
                ));
            };
            let port = port
                .parse()
                .map_err(|_| error("the port is not a number from 0 to 65535"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(error("the host is empty"));
            }
            Ok(Destination::Tcp {
                host: host.to_owned(),
                port,
            })
        } else {
            Err(error("expected unix:///PATH or tcp://HOST:PORT"))
        }
    }

    /// `unix` or `tcp`, as upstream's `{{.GRPCServer.Network}}`.
    pub fn network(&self) -> &'static str {
        match self {
            Destination::Unix(_) => "unix",
            Destination::Tcp { .. } => "tcp",
        }
    }

    /// The socket path, or `host:port`, as upstream's `{{.GRPCServer.Address}}`.
    pub fn address(&self) -> String {
        match self {
            Destination::Unix(path) => path.display().to_string(),
            Destination::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Destination::Tcp { host, port } => format!("{host}:{port}"),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.network())?;
        f.write_str(&self.address())
    }
}

/// Splits an SSH address into host and port: `host:port`, `[v6]:port`, or a bare host
/// (port 22).
pub(crate) fn split_host_port(address: &str) -> Result<(String, u16), SshError> {
    let error = |reason: &str| SshError::Address {
        address: address.to_owned(),
        reason: reason.to_owned(),
    };
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| error("an unclosed [ in the host"))?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(error("expected [host]:port")),
        }
    } else {
        match address.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => (address, None),
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    if host.is_empty() {
        return Err(error("the host is empty"));
    }
    let port = match port {
        Some(port) => port
            .parse()
            .map_err(|_| error("the port is not a number from 0 to 65535"))?,
        None => 22,
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_addresses() {
        assert_eq!(
            Destination::parse("unix:///var/run/w.sock").unwrap(),
            Destination::Unix("/var/run/w.sock".into())
        );
        let tcp = Destination::parse("tcp://127.0.0.1:7777").unwrap();
        assert_eq!(
            tcp,
            Destination::Tcp {
                host: "127.0.0.1".into(),
                port: 7777
            }
        );
        assert_eq!(tcp.to_string(), "tcp://127.0.0.1:7777");
        assert_eq!(
            Destination::parse("tcp://[::1]:7").unwrap().address(),
            "[::1]:7"
        );
        for bad in [
            "unix://rel.sock",
            "tcp://host",
            "tcp://:1",
            "tcp://h:99999",
            "http://x",
        ] {
            assert!(Destination::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ssh_addresses() {
        assert_eq!(split_host_port("h:2222").unwrap(), ("h".into(), 2222));
        assert_eq!(split_host_port("h").unwrap(), ("h".into(), 22));
        assert_eq!(split_host_port("[::1]:2").unwrap(), ("::1".into(), 2));
        assert_eq!(split_host_port("::1").unwrap(), ("::1".into(), 22));
        assert!(split_host_port("h:x").is_err());
        assert!(split_host_port(":22").is_err());
    }
}
