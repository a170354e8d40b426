//! Services that talk: private names on the private listener with the caller's identity,
//! routes off the public listeners, Cloudflare-only routes, and the instances' resolver. Each
//! loopback source address (127.0.0.2, 127.0.0.3, …) plays an instance of its own.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
// The helpers below are test code too: a failing unwrap is a failing test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use runway_ingress::dns::{Dns, DnsOptions};
use runway_ingress::{
    Ingress, InstanceConfig, Options, RevisionConfig, RouteConfig, RouteTableConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};

/// Every test is bounded.
const BOUND: Duration = Duration::from_secs(30);

/// The headers an instance reports having seen, as `x-saw-<name>`.
const REPORTED: [&str; 4] = [
    "runway-caller",
    "x-forwarded-for",
    "cf-connecting-ip",
    "host",
];

/// An instance that answers `name` and reports what it saw of [`REPORTED`].
async fn upstream(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(move |request: Request<Incoming>| async move {
                let mut response = Response::new(Full::new(Bytes::from(name)));
                for header in REPORTED {
                    if let Some(value) = request.headers().get(header) {
                        response.headers_mut().insert(
                            format!("x-saw-{header}")
                                .parse::<http::HeaderName>()
                                .unwrap(),
                            value.clone(),
                        );
                    }
                }
                Ok::<_, Infallible>(response)
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// An ingress serving `table` publicly and privately, each on a loopback port of its own.
struct Served {
    ingress: Ingress,
    public: SocketAddr,
    private: SocketAddr,
}

async fn serve(table: &RouteTableConfig) -> Served {
    let ingress = Ingress::new(Options::default());
    ingress.set_routes(table).unwrap();
    let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let private = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let served = Served {
        ingress: ingress.clone(),
        public: public.local_addr().unwrap(),
        private: private.local_addr().unwrap(),
    };
    let other = ingress.clone();
    tokio::spawn(async move { ingress.serve(public, std::future::pending()).await });
    tokio::spawn(async move { other.serve_private(private, std::future::pending()).await });
    served
}

fn route(service: &str, instance: SocketAddr) -> RouteConfig {
    RouteConfig {
        revisions: vec![RevisionConfig {
            name: format!("{service}-1"),
            weight: 100,
            tag: Some("blue".to_owned()),
            average_start_seconds: None,
            protocol: runway_ingress::Protocol::Http1,
            failing: false,
            instances: vec![InstanceConfig {
                address: instance,
                ready: true,
                draining: false,
                max_concurrency: 0,
            }],
        }],
        request_timeout_seconds: 5.0,
        ..RouteConfig::new(service, "prod")
    }
}

/// The platform: `api` (private, public too), `billing` (private to `api` alone, not public),
/// `web` (public only). Instances: 127.0.0.2 is `api/prod`, 127.0.0.3 `web/prod`, 127.0.0.4
/// `worker/dev`.
async fn platform() -> RouteTableConfig {
    let api = RouteConfig {
        private: true,
        ..route("api", upstream("api").await)
    };
    let billing = RouteConfig {
        private: true,
        public: false,
        callers: vec!["api".to_owned(), "worker/dev".to_owned()],
        domains: vec!["billing.example.test".to_owned()],
        ..route("billing", upstream("billing").await)
    };
    let web = route("web", upstream("web").await);
    RouteTableConfig {
        routes: vec![api, billing, web],
        callers: BTreeMap::from([
            (ip("127.0.0.2"), "api/prod".to_owned()),
            (ip("127.0.0.3"), "web/prod".to_owned()),
            (ip("127.0.0.4"), "worker/dev".to_owned()),
        ]),
        ..RouteTableConfig::default()
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// One GET of `host` from source address `from`, with `headers`: status, headers, body.
async fn get_from(
    from: &str,
    to: SocketAddr,
    host: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip(from), 0)).unwrap();
    let stream = socket.connect(to).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get("/").header("host", host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(
        BOUND,
        sender.send_request(request.body(Empty::<Bytes>::new()).unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn saw<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(format!("x-saw-{name}"))
        .map(|value| value.to_str().unwrap())
}

/// An instance reaches a private name; the ingress stamps who called, replacing whatever the
/// caller claimed; a tag's private name reaches its revision.
#[tokio::test]
async fn a_private_name_is_reached_with_the_caller_stamped() {
    let served = serve(&platform().await).await;
    let (status, headers, body) =
        get_from("127.0.0.3", served.private, "api.prod.internal", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "api"));
    assert_eq!(saw(&headers, "runway-caller"), Some("web/prod"));
    assert_eq!(saw(&headers, "x-forwarded-for"), Some("127.0.0.3"));

    let forged = [
        ("runway-caller", "billing/prod"),
        ("Runway-Caller", "admin/prod"),
    ];
    let (status, headers, _) =
        get_from("127.0.0.3", served.private, "api.prod.internal:80", &forged).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(saw(&headers, "runway-caller"), Some("web/prod"));

    let (status, _, body) =
        get_from("127.0.0.2", served.private, "blue---api.prod.internal", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "api"));
}

/// A private route admits only its callers (a service in any environment, or one
/// environment); anyone else is refused by name, and an address that is no instance is
/// refused as such.
#[tokio::test]
async fn only_admitted_callers_reach_a_private_name() {
    let served = serve(&platform().await).await;
    for from in ["127.0.0.2", "127.0.0.4"] {
        let (status, headers, body) =
            get_from(from, served.private, "billing.prod.internal", &[]).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "billing"),
            "{from}"
        );
        assert!(saw(&headers, "runway-caller").is_some());
    }
    let (status, _, body) =
        get_from("127.0.0.3", served.private, "billing.prod.internal", &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body.contains("caller web/prod may not call this service"),
        "{body}"
    );

    let (status, _, body) = get_from("127.0.0.9", served.private, "api.prod.internal", &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body.contains("127.0.0.9 is no instance of this platform"),
        "{body}"
    );

    // A public-only route has no private name; a public name is not served privately.
    let (status, _, _) = get_from("127.0.0.2", served.private, "web.prod.internal", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get_from("127.0.0.2", served.private, "api.prod.localhost", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The public listeners strip a client's `Runway-Caller` and `CF-Connecting-IP`, never serve a
/// `.internal` name, and leave a route with `public: false` unnamed (its public name, tags
/// and custom domains 404) while its private name works.
#[tokio::test]
async fn the_public_side_knows_nothing_of_callers_or_private_names() {
    let served = serve(&platform().await).await;
    let claims = [
        ("runway-caller", "api/prod"),
        ("cf-connecting-ip", "203.0.113.9"),
    ];
    let (status, headers, body) =
        get_from("127.0.0.1", served.public, "api.prod.localhost", &claims).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "api"));
    assert_eq!(saw(&headers, "runway-caller"), None);
    assert_eq!(saw(&headers, "cf-connecting-ip"), None);

    for host in [
        "api.prod.internal",
        "billing.prod.localhost",
        "blue---billing.prod.localhost",
        "billing.example.test",
        "billing.prod.internal",
    ] {
        let (status, _, body) = get_from("127.0.0.2", served.public, host, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{host}: {body}");
    }
    let (status, _, body) =
        get_from("127.0.0.2", served.private, "billing.prod.internal", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "billing"));
}

/// A Cloudflare route admits only peers in the operator's ranges, trusting their
/// `CF-Connecting-IP` and `X-Forwarded-For`; the ranges file is read again when it changes;
/// with no file, every client is refused, saying why.
#[tokio::test]
async fn a_cloudflare_route_admits_only_cloudflare() {
    let mut table = platform().await;
    table.routes[2].cloudflare = true;
    let served = serve(&table).await;
    let cf = [
        ("cf-connecting-ip", "203.0.113.9"),
        ("x-forwarded-for", "203.0.113.9"),
    ];

    let (status, _, body) = get_from("127.0.0.5", served.public, "web.prod.localhost", &cf).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("no Cloudflare ranges"), "{body}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cloudflare.txt");
    std::fs::write(&file, "# Cloudflare's\n127.0.0.5/32\n").unwrap();
    let watch = served
        .ingress
        .watch_cloudflare_ranges(file.clone(), Duration::from_millis(50));
    let admitted = |from: &'static str| {
        let public = served.public;
        async move { get_from(from, public, "web.prod.localhost", &cf).await }
    };
    let deadline = tokio::time::Instant::now() + BOUND;
    let (status, headers, body) = loop {
        let answer = admitted("127.0.0.5").await;
        if answer.0 != StatusCode::FORBIDDEN || tokio::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((status, body.as_str()), (StatusCode::OK, "web"));
    assert_eq!(saw(&headers, "cf-connecting-ip"), Some("203.0.113.9"));
    assert_eq!(
        saw(&headers, "x-forwarded-for"),
        Some("203.0.113.9, 127.0.0.5")
    );

    let (status, _, body) = admitted("127.0.0.6").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body.contains("127.0.0.6 is not in Cloudflare's ranges"),
        "{body}"
    );
    // Other routes are not Cloudflare's: any client, and no CF-Connecting-IP passed on.
    let (status, headers, _) =
        get_from("127.0.0.6", served.public, "api.prod.localhost", &cf).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(saw(&headers, "cf-connecting-ip"), None);

    // A bad file keeps the list in force; a good one replaces it.
    std::fs::write(&file, "127.0.0.5/32\nnot a range\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(admitted("127.0.0.5").await.0, StatusCode::OK);
    std::fs::write(&file, "127.0.0.6/32\n# moved\n").unwrap();
    let deadline = tokio::time::Instant::now() + BOUND;
    while admitted("127.0.0.6").await.0 != StatusCode::OK {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the file was not read again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(admitted("127.0.0.5").await.0, StatusCode::FORBIDDEN);
    watch.abort();
}

// ---------------------------------------------------------------------------------------
// DNS

/// The private listener's address in these tests.
const PLATFORM: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);

/// A stand-in upstream resolver on 127.0.0.1 (UDP and TCP): every A query gets 192.0.2.7.
async fn test_upstream() -> SocketAddr {
    fn answer(query: &[u8]) -> Vec<u8> {
        let query = Message::from_vec(query).unwrap();
        let mut response = Message::response(query.metadata.id, OpCode::Query);
        response.add_queries(query.queries.iter().cloned());
        for question in &query.queries {
            response.add_answer(Record::from_rdata(
                question.name().clone(),
                60,
                RData::A(A(Ipv4Addr::new(192, 0, 2, 7))),
            ));
        }
        response.to_vec().unwrap()
    }
    let (udp, tcp, address) = udp_and_tcp().await;
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 65535];
        while let Ok((length, from)) = udp.recv_from(&mut buffer).await {
            let _ = udp.send_to(&answer(&buffer[..length]), from).await;
        }
    });
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = tcp.accept().await {
            tokio::spawn(async move {
                let query = read_framed(&mut stream).await;
                write_framed(&mut stream, &answer(&query)).await;
            });
        }
    });
    address
}

/// A UDP socket and a TCP listener on one loopback port: a free UDP port's number may be taken
/// for TCP by another test's listener, so another is tried then.
async fn udp_and_tcp() -> (UdpSocket, TcpListener, SocketAddr) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = udp.local_addr().unwrap();
        if let Ok(tcp) = TcpListener::bind(address).await {
            return (udp, tcp, address);
        }
    }
    panic!("no loopback port free for both UDP and TCP");
}

async fn read_framed(stream: &mut TcpStream) -> Vec<u8> {
    let length = stream.read_u16().await.unwrap();
    let mut message = vec![0u8; usize::from(length)];
    stream.read_exact(&mut message).await.unwrap();
    message
}

async fn write_framed(stream: &mut TcpStream, message: &[u8]) {
    let mut framed = (message.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(message);
    stream.write_all(&framed).await.unwrap();
}

fn query(name: &str, kind: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
    message.to_vec().unwrap()
}

/// The resolver of `platform()`'s table, UDP and TCP on one loopback port, forwarding to
/// `upstream`.
async fn resolver(upstream: SocketAddr) -> SocketAddr {
    let ingress = Ingress::new(Options::default());
    ingress.set_routes(&platform().await).unwrap();
    let dns = Dns::new(ingress, DnsOptions::new(PLATFORM, vec![upstream]));
    let (udp, tcp, address) = udp_and_tcp().await;
    tokio::spawn(std::sync::Arc::clone(&dns).serve_udp(udp));
    tokio::spawn(dns.serve_tcp(tcp));
    address
}

async fn ask_udp(server: SocketAddr, packet: &[u8]) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(packet, server).await.unwrap();
    let mut buffer = vec![0u8; 65535];
    let length = tokio::time::timeout(BOUND, socket.recv(&mut buffer))
        .await
        .unwrap()
        .unwrap();
    let answer = Message::from_vec(&buffer[..length]).unwrap();
    assert_eq!(answer.metadata.message_type, MessageType::Response);
    assert_eq!(
        answer.metadata.id,
        Message::from_vec(packet).unwrap().metadata.id
    );
    answer
}

fn addresses(message: &Message) -> Vec<Ipv4Addr> {
    message
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(A(address)) => Some(*address),
            _ => None,
        })
        .collect()
}

/// A private name resolves to the private listener; an unknown `.internal` name (or a public
/// route's) is NXDOMAIN; AAAA of a private name is NOERROR with no answer; any other name is
/// the upstream's answer, over UDP and over TCP.
#[tokio::test]
async fn instances_resolve_private_names_and_the_rest_through_upstreams() {
    let server = resolver(test_upstream().await).await;

    let private = ask_udp(server, &query("billing.prod.internal.", RecordType::A)).await;
    assert_eq!(private.metadata.response_code, ResponseCode::NoError);
    assert_eq!(addresses(&private), vec![PLATFORM]);
    let tag = ask_udp(server, &query("blue---api.prod.internal.", RecordType::A)).await;
    assert_eq!(addresses(&tag), vec![PLATFORM]);

    for name in ["nope.prod.internal.", "web.prod.internal."] {
        let unknown = ask_udp(server, &query(name, RecordType::A)).await;
        assert_eq!(
            unknown.metadata.response_code,
            ResponseCode::NXDomain,
            "{name}"
        );
    }
    let v6 = ask_udp(server, &query("api.prod.internal.", RecordType::AAAA)).await;
    assert_eq!(v6.metadata.response_code, ResponseCode::NoError);
    assert!(v6.answers.is_empty());

    let forwarded = ask_udp(server, &query("example.com.", RecordType::A)).await;
    assert_eq!(addresses(&forwarded), vec![Ipv4Addr::new(192, 0, 2, 7)]);

    let mut stream = TcpStream::connect(server).await.unwrap();
    for (name, expected) in [
        ("example.org.", Ipv4Addr::new(192, 0, 2, 7)),
        ("api.prod.internal.", PLATFORM),
    ] {
        let packet = query(name, RecordType::A);
        write_framed(&mut stream, &packet).await;
        let answer = tokio::time::timeout(BOUND, read_framed(&mut stream))
            .await
            .unwrap();
        assert_eq!(
            addresses(&Message::from_vec(&answer).unwrap()),
            vec![expected]
        );
    }
}

/// An upstream that does not answer costs a bounded wait and a SERVFAIL; garbage gets a
/// FORMERR or nothing, and the resolver goes on answering.
#[tokio::test]
async fn a_silent_upstream_or_garbage_leaves_the_resolver_answering() {
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let ingress = Ingress::new(Options::default());
    ingress.set_routes(&platform().await).unwrap();
    let mut options = DnsOptions::new(PLATFORM, vec![silent.local_addr().unwrap()]);
    options.timeout = Duration::from_millis(200);
    let dns = Dns::new(ingress, options);
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let server = udp.local_addr().unwrap();
    tokio::spawn(dns.serve_udp(udp));

    let failed = ask_udp(server, &query("example.com.", RecordType::A)).await;
    assert_eq!(failed.metadata.response_code, ResponseCode::ServFail);

    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&[0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff], server)
        .await
        .unwrap();
    let mut buffer = vec![0u8; 512];
    let length = tokio::time::timeout(BOUND, socket.recv(&mut buffer))
        .await
        .unwrap()
        .unwrap();
    let formerr = Message::from_vec(&buffer[..length]).unwrap();
    assert_eq!(
        (formerr.metadata.id, formerr.metadata.response_code),
        (0xabcd, ResponseCode::FormErr)
    );
    socket.send_to(&[1, 2, 3], server).await.unwrap();

    let answered = ask_udp(server, &query("api.prod.internal.", RecordType::A)).await;
    assert_eq!(addresses(&answered), vec![PLATFORM]);
}

/// The process binds the private listener and the resolver with IP_FREEBIND: an address no
/// interface has yet (the runtime makes the platform address later) neither fails the start
/// nor stops the public listener.
#[tokio::test]
async fn the_instances_listeners_bind_before_their_address_exists() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_runway-ingress"))
        .arg("--state-dir")
        .arg(&state)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args([
            "--private-listen",
            "192.0.2.1:0",
            "--dns-listen",
            "192.0.2.1:0",
        ])
        .args(["--dns-upstream", "127.0.0.1:9", "--event-loops", "1"])
        .arg("--ca-dir")
        .arg(dir.path().join("ca"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = runway_ingress::control::ControlClient::new(&state);
    let deadline = tokio::time::Instant::now() + BOUND;
    let hello = loop {
        if let Ok(hello) = client.hello().await {
            break hello;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ingress did not answer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let private = hello.bound.private.expect("a private listener");
    let dns = hello.bound.dns.expect("a resolver");
    assert_eq!((private.ip(), dns.ip()), (ip("192.0.2.1"), ip("192.0.2.1")));
    assert_eq!(
        hello.listen.dns_upstreams,
        vec!["127.0.0.1:9".parse::<SocketAddr>().unwrap()]
    );
    let (status, _, _) = get_from("127.0.0.1", hello.bound.http, "nobody.localhost", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let _ = client.stop().await;
    let _ = tokio::time::timeout(BOUND, child.wait()).await;
}
