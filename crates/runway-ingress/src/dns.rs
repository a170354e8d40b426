//! The resolver instances use (`--dns-listen`): `<service>.<env>.internal` names the table
//! serves privately answered with the private listener's address, other `.internal` names
//! NXDOMAIN, and every other query forwarded to the upstreams (`--dns-upstream`, by default
//! `/etc/resolv.conf`'s) and their answer relayed unchanged.
//!
//! Messages are read and written by `hickory-proto`; nothing here parses a packet by hand. Every
//! wait is bounded: each upstream gets [`DnsOptions::timeout`], forwarded queries in flight are
//! at most [`DnsOptions::max_in_flight`] (past it, SERVFAIL at once), TCP connections at most
//! [`DnsOptions::max_tcp_connections`], each closed after [`DnsOptions::tcp_idle`] without a
//! query.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::Ingress;
use crate::table::Table;

/// The time-to-live of a private name's answer: short, so a route that stops being private
/// is forgotten soon.
const PRIVATE_TTL: u32 = 5;

/// The largest DNS message (TCP's length prefix is 16 bits).
const MAX_MESSAGE: usize = u16::MAX as usize;

/// How the resolver is bounded, and where it forwards.
#[derive(Debug, Clone)]
pub struct DnsOptions {
    /// The address private names resolve to: the private listener's.
    pub answer: Ipv4Addr,
    /// Where other queries go, tried in order.
    pub upstreams: Vec<SocketAddr>,
    /// How long one upstream gets to answer one query.
    pub timeout: Duration,
    /// Forwarded queries in flight at once (UDP and TCP together).
    pub max_in_flight: usize,
    /// TCP connections from instances at once; past it, new ones are closed.
    pub max_tcp_connections: usize,
    /// A TCP connection without a query for this long is closed.
    pub tcp_idle: Duration,
}

impl DnsOptions {
    pub fn new(answer: Ipv4Addr, upstreams: Vec<SocketAddr>) -> Self {
        Self {
            answer,
            upstreams,
            timeout: Duration::from_secs(2),
            max_in_flight: 256,
            max_tcp_connections: 64,
            tcp_idle: Duration::from_secs(10),
        }
    }
}

/// The `nameserver` lines of a `resolv.conf`, port 53; addresses it cannot read (an IPv6 one
/// with a zone) are left out.
pub fn resolv_conf_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next()?.parse::<IpAddr>().ok())
                .flatten()
        })
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The system's resolvers (`/etc/resolv.conf`).
pub fn system_upstreams() -> Vec<SocketAddr> {
    std::fs::read_to_string(Path::new("/etc/resolv.conf"))
        .map(|text| resolv_conf_nameservers(&text))
        .unwrap_or_default()
}

/// What to do with one query.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Answered here: the response's bytes.
    Local(Vec<u8>),
    /// Not the platform's: the upstreams answer. Holds the SERVFAIL to send when none does.
    Forward(Vec<u8>),
    /// Not a query anyone should answer (too short to carry an id, or itself a response).
    Drop,
}

/// The reply to one message, by the current table. Never panics, whatever the bytes.
pub(crate) fn reply(table: &Table, answer: Ipv4Addr, packet: &[u8]) -> Reply {
    let message = match Message::from_vec(packet) {
        Ok(message) => message,
        Err(_) => {
            // A header is 12 bytes; without one there is no id to answer to.
            return match packet {
                [high, low, _, _, _, _, _, _, _, _, _, _, ..] => {
                    let id = u16::from_be_bytes([*high, *low]);
                    encode(&Message::error_msg(
                        id,
                        OpCode::Query,
                        ResponseCode::FormErr,
                    ))
                    .map_or(Reply::Drop, Reply::Local)
                }
                _ => Reply::Drop,
            };
        }
    };
    if message.metadata.message_type != MessageType::Query {
        return Reply::Drop;
    }
    let mut response = Message::response(message.metadata.id, message.metadata.op_code);
    response.metadata.recursion_desired = message.metadata.recursion_desired;
    response.metadata.checking_disabled = message.metadata.checking_disabled;
    response.metadata.recursion_available = true;
    response.add_queries(message.queries.iter().cloned());
    if message.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        response.set_edns(edns);
    }
    let [query] = message.queries.as_slice() else {
        response.metadata.response_code = ResponseCode::FormErr;
        return encode(&response).map_or(Reply::Drop, Reply::Local);
    };
    let Some(name) = private_name(query.name()) else {
        response.metadata.response_code = ResponseCode::ServFail;
        return encode(&response).map_or(Reply::Drop, Reply::Forward);
    };
    if message.metadata.op_code != OpCode::Query {
        response.metadata.response_code = ResponseCode::NotImp;
        return encode(&response).map_or(Reply::Drop, Reply::Local);
    }
    response.metadata.authoritative = true;
    let known = name
        .as_deref()
        .is_some_and(|name| table.serves_privately(name));
    if !known {
        response.metadata.response_code = ResponseCode::NXDomain;
    } else if matches!(query.query_type(), RecordType::A | RecordType::ANY)
        && matches!(query.query_class(), DNSClass::IN | DNSClass::ANY)
    {
        response.add_answer(Record::from_rdata(
            query.name().clone(),
            PRIVATE_TTL,
            RData::A(A(answer)),
        ));
    }
    // A known name of another type (AAAA): NOERROR with no answer.
    encode(&response).map_or(Reply::Drop, Reply::Local)
}

fn encode(message: &Message) -> Option<Vec<u8>> {
    message.to_vec().ok()
}

/// For a name under `internal.`: `Some(name)`, lower case without the root's dot, when its
/// labels are host labels; `Some(None)` when they are not (it is no name of the platform,
/// still answered here: `.internal` never leaves). `None` for any other name.
fn private_name(name: &hickory_proto::rr::Name) -> Option<Option<String>> {
    let labels: Vec<&[u8]> = name.iter().collect();
    let (last, rest) = labels.split_last()?;
    if !last.eq_ignore_ascii_case(crate::config::PRIVATE_DOMAIN.as_bytes()) {
        return None;
    }
    let host_labels = rest.iter().all(|label| {
        label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    });
    if !host_labels {
        return Some(None);
    }
    let mut text = String::with_capacity(name.len());
    for label in &labels {
        if !text.is_empty() {
            text.push('.');
        }
        text.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
    }
    Some(Some(text))
}

/// The resolver: shared by its UDP and TCP servers.
#[derive(Debug)]
pub struct Dns {
    ingress: Ingress,
    options: DnsOptions,
    in_flight: Arc<Semaphore>,
    connections: Arc<Semaphore>,
}

impl Dns {
    pub fn new(ingress: Ingress, options: DnsOptions) -> Arc<Self> {
        Arc::new(Self {
            in_flight: Arc::new(Semaphore::new(options.max_in_flight.max(1))),
            connections: Arc::new(Semaphore::new(options.max_tcp_connections.max(1))),
            ingress,
            options,
        })
    }

    fn reply(&self, packet: &[u8]) -> Reply {
        reply(
            &self.ingress.shared.routes.load_guard(),
            self.options.answer,
            packet,
        )
    }

    /// Serves queries on `socket` until the task is dropped.
    pub async fn serve_udp(self: Arc<Self>, socket: UdpSocket) -> std::io::Result<()> {
        let socket = Arc::new(socket);
        let mut buffer = vec![0u8; MAX_MESSAGE];
        loop {
            let (length, from) = match socket.recv_from(&mut buffer).await {
                Ok(received) => received,
                // An ICMP error from an earlier send, or a message too large: the next.
                Err(error) if is_transient(&error) => continue,
                Err(error) => return Err(error),
            };
            let packet = &buffer[..length];
            match self.reply(packet) {
                Reply::Drop => {}
                Reply::Local(bytes) => {
                    let _ = socket.send_to(&bytes, from).await;
                }
                Reply::Forward(servfail) => {
                    let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
                        let _ = socket.send_to(&servfail, from).await;
                        continue;
                    };
                    let (dns, socket, query) =
                        (Arc::clone(&self), Arc::clone(&socket), packet.to_vec());
                    tokio::spawn(async move {
                        let answer = dns.forward_udp(&query).await;
                        let _ = socket
                            .send_to(answer.as_deref().unwrap_or(&servfail), from)
                            .await;
                        drop(permit);
                    });
                }
            }
        }
    }

    /// Serves queries over TCP on `listener` until the task is dropped.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) if is_transient(&error) => {
                    // Out of descriptors, or the connection went: a moment's rest.
                    crate::timer::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let Ok(permit) = Arc::clone(&self.connections).try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let dns = Arc::clone(&self);
            tokio::spawn(async move {
                let _ = dns.serve_connection(stream).await;
                drop(permit);
            });
        }
    }

    /// One instance's TCP connection: length-prefixed queries, answered in turn.
    async fn serve_connection(&self, mut stream: TcpStream) -> std::io::Result<()> {
        let idle = self.options.tcp_idle;
        loop {
            let Ok(query) = crate::timer::timeout(idle, read_framed(&mut stream)).await else {
                return Ok(());
            };
            let Some(query) = query? else {
                return Ok(());
            };
            let answer = match self.reply(&query) {
                Reply::Drop => return Ok(()),
                Reply::Local(bytes) => bytes,
                Reply::Forward(servfail) => match Arc::clone(&self.in_flight).try_acquire_owned() {
                    Ok(_permit) => self.forward_tcp(&query).await.unwrap_or(servfail),
                    Err(_) => servfail,
                },
            };
            let written = crate::timer::timeout(idle, write_framed(&mut stream, &answer)).await;
            if !matches!(written, Ok(Ok(()))) {
                return Ok(());
            }
        }
    }

    /// The first upstream's answer over UDP, each upstream tried in turn for
    /// [`DnsOptions::timeout`]; an answer with another id than the query's is not taken.
    async fn forward_udp(&self, query: &[u8]) -> Option<Vec<u8>> {
        let id = query.get(..2)?;
        for upstream in &self.options.upstreams {
            let attempt = async {
                let local: SocketAddr = if upstream.is_ipv4() {
                    (Ipv4Addr::UNSPECIFIED, 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let socket = UdpSocket::bind(local).await.ok()?;
                socket.connect(upstream).await.ok()?;
                socket.send(query).await.ok()?;
                let mut buffer = vec![0u8; MAX_MESSAGE];
                loop {
                    let length = socket.recv(&mut buffer).await.ok()?;
                    if buffer.get(..2) == Some(id) {
                        buffer.truncate(length);
                        return Some(buffer);
                    }
                }
            };
            if let Ok(Some(answer)) = crate::timer::timeout(self.options.timeout, attempt).await {
                return Some(answer);
            }
        }
        None
    }

    /// The first upstream's answer over TCP, each tried in turn for [`DnsOptions::timeout`].
    async fn forward_tcp(&self, query: &[u8]) -> Option<Vec<u8>> {
        for upstream in &self.options.upstreams {
            let attempt = async {
                let mut stream = TcpStream::connect(upstream).await.ok()?;
                write_framed(&mut stream, query).await.ok()?;
                read_framed(&mut stream).await.ok()?
            };
            if let Ok(Some(answer)) = crate::timer::timeout(self.options.timeout, attempt).await {
                return Some(answer);
            }
        }
        None
    }
}

fn is_transient(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    ) || error.raw_os_error() == Some(24) // EMFILE
        || error.raw_os_error() == Some(23) // ENFILE
        || error.raw_os_error() == Some(90) // EMSGSIZE
}

/// One length-prefixed message (RFC 1035 section 4.2.2); none at a clean end of stream.
async fn read_framed(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut length = [0u8; 2];
    match stream.read_exact(&mut length).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut message).await?;
    Ok(Some(message))
}

async fn write_framed(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
    let length = u16::try_from(message.len())
        .map_err(|_| std::io::Error::other("a DNS message over 65535 bytes"))?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RouteConfig, RouteTableConfig};
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use proptest::prelude::*;

    fn table() -> Arc<Table> {
        let routes = crate::table::Routes::new(Arc::new(crate::Metrics::new()), Duration::ZERO, 16);
        routes
            .set(&RouteTableConfig {
                routes: vec![
                    RouteConfig {
                        private: true,
                        ..RouteConfig::new("api", "prod")
                    },
                    RouteConfig::new("web", "prod"),
                ],
                ..RouteTableConfig::default()
            })
            .unwrap();
        routes.load()
    }

    const ANSWER: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);

    fn query(name: &str, kind: RecordType) -> Vec<u8> {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        message.to_vec().unwrap()
    }

    fn local(reply: Reply) -> Message {
        match reply {
            Reply::Local(bytes) => Message::from_vec(&bytes).unwrap(),
            other => panic!("not answered here: {other:?}"),
        }
    }

    #[test]
    fn private_names_are_answered_and_others_forwarded() {
        let table = table();
        let answered = local(reply(
            &table,
            ANSWER,
            &query("API.prod.internal.", RecordType::A),
        ));
        assert_eq!(answered.metadata.response_code, ResponseCode::NoError);
        assert_eq!(answered.answers.len(), 1);
        assert_eq!(answered.answers[0].data, RData::A(A(ANSWER)));
        let v6 = local(reply(
            &table,
            ANSWER,
            &query("api.prod.internal.", RecordType::AAAA),
        ));
        assert_eq!(v6.metadata.response_code, ResponseCode::NoError);
        assert!(v6.answers.is_empty());
        // Public only, unknown, or not a host name: NXDOMAIN, never forwarded.
        for name in [
            "web.prod.internal.",
            "nope.prod.internal.",
            "internal.",
            "a_b.internal.",
        ] {
            let refused = local(reply(&table, ANSWER, &query(name, RecordType::A)));
            assert_eq!(
                refused.metadata.response_code,
                ResponseCode::NXDomain,
                "{name}"
            );
        }
        assert!(matches!(
            reply(&table, ANSWER, &query("example.com.", RecordType::A)),
            Reply::Forward(_)
        ));
        assert_eq!(reply(&table, ANSWER, &[1, 2, 3]), Reply::Drop);
    }

    #[test]
    fn resolv_conf_lines_are_read() {
        let text =
            "# x\nnameserver 127.0.0.53\nnameserver ::1\nnameserver fe80::1%eth0\nsearch a\n";
        assert_eq!(
            resolv_conf_nameservers(text),
            vec![
                "127.0.0.53:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
    }

    proptest! {
        /// No packet panics the resolver: random bytes, and real queries with bytes changed.
        #[test]
        fn no_packet_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = reply(&table(), ANSWER, &bytes);
        }

        #[test]
        fn no_mangled_query_panics(
            name in "[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,3}\\.internal\\.",
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        ) {
            let mut packet = query(&name, RecordType::A);
            for (at, value) in flips {
                let length = packet.len();
                packet[at % length] = value;
            }
            let _ = reply(&table(), ANSWER, &packet);
        }
    }
}
