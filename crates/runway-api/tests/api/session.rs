//! The web console without a browser: its files and headers, sessions in a cookie, the
//! refusal of cross-site changes, signing out, and the watch stream.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::HeaderMap;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::support::{Server, deploy_body, start};

/// An answer with its headers.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    body: Value,
}

impl Reply {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }
    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

async fn connect(server: &Server) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Request<Full<Bytes>> {
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path)
        .header("host", "localhost");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let bytes = body.map(|b| serde_json::to_vec(&b).unwrap());
    request
        .body(Full::new(Bytes::from(bytes.unwrap_or_default())))
        .unwrap()
}

/// A request with these headers, to its end.
async fn send(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Reply {
    let mut sender = connect(server).await;
    let response = sender
        .send_request(request(method, path, headers, body))
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        text,
        body,
    }
}

const CONSOLE: (&str, &str) = ("x-runway-console", "1");

/// Signs in with `token` as the console does; returns the answer and the cookie's
/// `name=value`.
async fn sign_in(server: &Server, token: &str) -> (Reply, String) {
    let reply = send(
        server,
        "POST",
        "/v1/session",
        &[CONSOLE, ("origin", "https://localhost")],
        Some(json!({"token": token})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let cookie = reply
        .header("set-cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    (reply, cookie)
}

#[tokio::test]
async fn the_console_is_served_with_strict_headers_and_cached_by_etag() {
    let server = start().await;
    let root = send(&server, "GET", "/", &[], None).await;
    assert!(root.status.is_redirection(), "{}", root.status);
    assert_eq!(root.header("location"), "/ui/");

    let page = send(&server, "GET", "/ui/", &[], None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.header("content-type"), "text/html; charset=utf-8");
    assert_eq!(
        page.header("content-security-policy"),
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    );
    assert_eq!(page.header("x-content-type-options"), "nosniff");
    assert_eq!(page.header("referrer-policy"), "no-referrer");
    assert_eq!(page.header("cache-control"), "no-cache");
    // No inline script or style: the policy would block them.
    assert!(!page.text.contains("<script>"), "an inline script");
    assert!(!page.text.contains("<style"), "an inline style");
    assert!(!page.text.contains(" style="), "an inline style attribute");
    assert!(!page.text.contains("http://") && !page.text.contains("https://"));

    let etag = page.header("etag").to_owned();
    assert!(etag.starts_with('"'), "{etag}");
    let again = send(&server, "GET", "/ui/", &[("if-none-match", &etag)], None).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.text.is_empty());

    let script = send(&server, "GET", "/ui/app.js", &[], None).await;
    assert_eq!(script.status, StatusCode::OK);
    assert_eq!(
        script.header("content-type"),
        "text/javascript; charset=utf-8"
    );
    assert_ne!(script.header("etag"), etag);
    assert!(!script.header("content-security-policy").is_empty());

    // A page of the console is the same document; a file it does not have is a 404.
    let deep = send(&server, "GET", "/ui/services/hello/dev", &[], None).await;
    assert_eq!(deep.status, StatusCode::OK);
    assert_eq!(deep.text, page.text);
    let missing = send(&server, "GET", "/ui/nothing.js", &[], None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.header("x-content-type-options"), "nosniff");

    // Every file is small, and all of them together are under the first page's budget.
    let total: usize = runway_api::console::files().map(|(_, size)| size).sum();
    assert!(total < 100_000, "the console's files are {total} bytes");
    for (name, _) in runway_api::console::files() {
        let file = send(&server, "GET", &format!("/ui/{name}"), &[], None).await;
        assert_eq!(file.status, StatusCode::OK, "{name}");
        for url in ["http://", "https://", "//cdn"] {
            // Nothing is fetched from elsewhere (the SVG's namespace is a name, not a fetch).
            if name != "icon.svg" {
                assert!(
                    !file.text.contains(&format!("from '{url}")),
                    "{name} imports from {url}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_session_is_a_token_of_its_own_in_an_http_only_cookie() {
    let server = start().await;
    let (reply, cookie) = sign_in(&server, &server.admin).await;
    let set = reply.header("set-cookie");
    for part in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=",
    ] {
        assert!(set.contains(part), "{set}");
    }
    let max_age: u64 = set
        .split("Max-Age=")
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((43_100..=43_200).contains(&max_age), "{max_age}");
    assert!(
        cookie.starts_with("runway_session=runway_admin_"),
        "{cookie}"
    );
    let value = cookie.split_once('=').unwrap().1;
    assert_ne!(value, server.admin, "the cookie holds the token typed");
    // The body says what the session is, never its token.
    assert_eq!(reply.body["name"], "console: admin");
    assert_eq!(reply.body["scope"], json!({"admin": {}}));
    assert!(!reply.text.contains(value));

    // The cookie authenticates, as the session.
    let who = send(&server, "GET", "/v1/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(who.status, StatusCode::OK, "{}", who.text);
    assert_eq!(who.body["name"], "console: admin");
    // Among other cookies too.
    let mixed = format!("theme=dark; {cookie}; other=1");
    let who = send(&server, "GET", "/v1/whoami", &[("cookie", &mixed)], None).await;
    assert_eq!(who.status, StatusCode::OK, "{}", who.text);

    // The store audited its making, by the token signed in with.
    let audit = server.admin("GET", "/v1/audit?last=5", None, 200).await;
    let made = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "token.create" && a["detail"]["name"] == "console: admin")
        .unwrap();
    assert_eq!(made["actor"], "admin", "{made}");
    assert_eq!(made["detail"]["parent"], 1, "{made}");
}

#[tokio::test]
async fn a_change_with_the_cookie_must_come_from_the_console() {
    let server = start().await;
    let (_, cookie) = sign_in(&server, &server.admin).await;
    let body = || Some(json!({"name": "hello", "owners": ["alice"]}));
    // Without the console's header: what a form on another site would send.
    let bare = send(
        &server,
        "POST",
        "/v1/services",
        &[("cookie", &cookie)],
        body(),
    )
    .await;
    assert_eq!(bare.status, StatusCode::FORBIDDEN, "{}", bare.text);
    assert!(
        bare.message().contains("X-Runway-Console: 1"),
        "{}",
        bare.text
    );
    // With the header but from another origin, or from plain HTTP.
    for origin in ["https://evil.example", "http://localhost", "null"] {
        let foreign = send(
            &server,
            "POST",
            "/v1/services",
            &[("cookie", &cookie), CONSOLE, ("origin", origin)],
            body(),
        )
        .await;
        assert_eq!(
            foreign.status,
            StatusCode::FORBIDDEN,
            "{origin}: {}",
            foreign.text
        );
        assert!(foreign.message().contains("origin"), "{}", foreign.text);
    }
    // None of those did anything.
    let list = server.admin("GET", "/v1/services", None, 200).await;
    assert_eq!(list, json!([]));
    // The console's own: the header, and this origin or none.
    let own = send(
        &server,
        "POST",
        "/v1/services",
        &[
            ("cookie", &cookie),
            CONSOLE,
            ("origin", "https://localhost"),
        ],
        body(),
    )
    .await;
    assert_eq!(own.status, StatusCode::CREATED, "{}", own.text);
    assert_eq!(own.body["created_by"], "console: admin");
    let deleted = send(
        &server,
        "DELETE",
        "/v1/services/hello?confirm=hello",
        &[("cookie", &cookie), CONSOLE],
        None,
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    // Reading needs no header.
    let read = send(&server, "GET", "/v1/services", &[("cookie", &cookie)], None).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    // A bearer token is no browser's: no header needed, the cookie ignored.
    let bearer = format!("Bearer {}", server.admin);
    let scripted = send(
        &server,
        "POST",
        "/v1/services",
        &[
            ("authorization", &bearer),
            ("cookie", "runway_session=nonsense"),
        ],
        body(),
    )
    .await;
    assert_eq!(scripted.status, StatusCode::CREATED, "{}", scripted.text);

    // Signing in from another site is refused too: it would sign a visitor in as someone
    // else.
    for headers in [vec![], vec![CONSOLE, ("origin", "https://evil.example")]] {
        let forged = send(
            &server,
            "POST",
            "/v1/session",
            &headers,
            Some(json!({"token": server.admin})),
        )
        .await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.text);
        assert!(forged.header("set-cookie").is_empty());
    }
}

#[tokio::test]
async fn sign_in_refuses_what_the_bearer_path_refuses() {
    let server = start().await;
    let bearer = send(
        &server,
        "GET",
        "/v1/whoami",
        &[("authorization", "Bearer runway_admin_nonsense")],
        None,
    )
    .await;
    assert_eq!(bearer.status, StatusCode::UNAUTHORIZED);
    let (unknown, _) = runway_secrets::Token::generate(runway_secrets::TokenKind::Admin).unwrap();
    for token in ["runway_admin_nonsense", "garbage", unknown.expose(), ""] {
        let reply = send(
            &server,
            "POST",
            "/v1/session",
            &[CONSOLE],
            Some(json!({"token": token})),
        )
        .await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{token}: {}",
            reply.text
        );
        assert_eq!(reply.message(), bearer.message(), "{token}");
        assert!(reply.header("set-cookie").is_empty());
    }
    // An identity token (a JWT) opens no session.
    let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    let reply = send(
        &server,
        "POST",
        "/v1/session",
        &[CONSOLE],
        Some(json!({"token": jwt})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert_eq!(reply.body["error"]["field"], "token");
    assert!(reply.message().contains("Runway token"), "{}", reply.text);
    // An expired token: 401, as on the bearer path.
    server.onboard("hello").await;
    let short = server.deploy_token("hello", &["dev"], Some(1)).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let reply = send(
        &server,
        "POST",
        "/v1/session",
        &[CONSOLE],
        Some(json!({"token": short})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);
    let expired = send(
        &server,
        "GET",
        "/v1/whoami",
        &[("authorization", &format!("Bearer {short}"))],
        None,
    )
    .await;
    assert_eq!(reply.message(), expired.message());
    // Unknown fields are refused, naming none of the token.
    let reply = send(
        &server,
        "POST",
        "/v1/session",
        &[CONSOLE],
        Some(json!({"token": server.admin, "remember": true})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert!(!reply.text.contains(&server.admin));
}

#[tokio::test]
async fn a_deploy_tokens_session_sees_its_service_and_ends_with_its_token() {
    let server = start().await;
    server.onboard("alpha").await;
    server.onboard("beta").await;
    let token = server.deploy_token("alpha", &["dev"], Some(600)).await;
    let (reply, cookie) = sign_in(&server, &token).await;
    assert_eq!(reply.body["name"], "console: ci for alpha");
    assert_eq!(
        reply.body["scope"],
        json!({"deploy": {"service": "alpha", "environments": ["dev"]}})
    );
    // It lives no longer than its token: 600 s, not 12 hours.
    let max_age: u64 = reply
        .header("set-cookie")
        .split("Max-Age=")
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(max_age <= 600, "{max_age}");
    assert!(
        cookie.starts_with("runway_session=runway_deploy_"),
        "{cookie}"
    );

    let list = send(&server, "GET", "/v1/services", &[("cookie", &cookie)], None).await;
    let names: Vec<&str> = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha"]);
    let other = send(
        &server,
        "GET",
        "/v1/services/beta",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.text);
    let deploy = send(
        &server,
        "POST",
        "/v1/services/alpha/environments/dev/deployments",
        &[("cookie", &cookie), CONSOLE],
        Some(deploy_body("alpha")),
    )
    .await;
    assert_eq!(deploy.status, StatusCode::ACCEPTED, "{}", deploy.text);
    assert_eq!(deploy.body["created_by"], "console: ci for alpha");

    // A session's token opens no session of its own.
    let value = cookie.split_once('=').unwrap().1;
    let chained = send(
        &server,
        "POST",
        "/v1/session",
        &[CONSOLE],
        Some(json!({"token": value})),
    )
    .await;
    assert_eq!(chained.status, StatusCode::BAD_REQUEST, "{}", chained.text);

    // Revoking the deploy token ends its session.
    let tokens = server.admin("GET", "/v1/tokens", None, 200).await;
    let id = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci for alpha")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    server
        .admin("DELETE", &format!("/v1/tokens/{id}"), None, 200)
        .await;
    let after = send(&server, "GET", "/v1/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED, "{}", after.text);
}

#[tokio::test]
async fn a_decommissioned_services_sessions_end_with_its_deploy_tokens() {
    let server = start().await;
    server.onboard("alpha").await;
    let token = server.deploy_token("alpha", &["dev"], None).await;
    let (_, cookie) = sign_in(&server, &token).await;
    let who = send(&server, "GET", "/v1/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(who.status, StatusCode::OK, "{}", who.text);
    server
        .admin("DELETE", "/v1/services/alpha?confirm=alpha", None, 200)
        .await;
    let after = send(&server, "GET", "/v1/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED, "{}", after.text);
}

#[tokio::test]
async fn signing_out_revokes_the_session_and_clears_the_cookie() {
    let server = start().await;
    let (_, cookie) = sign_in(&server, &server.admin).await;
    // Not from another site.
    let forged = send(
        &server,
        "DELETE",
        "/v1/session",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.text);
    let out = send(
        &server,
        "DELETE",
        "/v1/session",
        &[("cookie", &cookie), CONSOLE],
        None,
    )
    .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT, "{}", out.text);
    let cleared = out.header("set-cookie");
    assert!(cleared.starts_with("runway_session=;"), "{cleared}");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // The old cookie's value works no more.
    let after = send(&server, "GET", "/v1/whoami", &[("cookie", &cookie)], None).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED, "{}", after.text);
    // Signing out again: 401, and the browser is told to forget the cookie.
    let again = send(
        &server,
        "DELETE",
        "/v1/session",
        &[("cookie", &cookie), CONSOLE],
        None,
    )
    .await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
    assert!(again.header("set-cookie").contains("Max-Age=0"));
    // The token signed in with still works; it is no session, so it cannot "sign out".
    let bearer = format!("Bearer {}", server.admin);
    let not_session = send(
        &server,
        "DELETE",
        "/v1/session",
        &[("authorization", &bearer)],
        None,
    )
    .await;
    assert_eq!(
        not_session.status,
        StatusCode::BAD_REQUEST,
        "{}",
        not_session.text
    );
    server.admin("GET", "/v1/whoami", None, 200).await;
}

/// Reads a stream's body until `wanted` is in it (or 10 s pass); returns what came.
async fn read_until(body: &mut hyper::body::Incoming, wanted: &str) -> String {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !text.contains(wanted) {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .unwrap_or_else(|_| panic!("no {wanted:?} within 10 s; got:\n{text}"));
        let Some(frame) = frame else {
            panic!("the stream ended before {wanted:?}; got:\n{text}");
        };
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
    text
}

#[tokio::test]
async fn the_watch_stream_sends_changes_and_ends_with_the_session() {
    let server = start().await;
    server.onboard("hello").await;
    let (_, cookie) = sign_in(&server, &server.admin).await;
    let path = "/v1/services/hello/environments/dev/watch";
    // It streams only to a client that asks for events.
    let plain = send(&server, "GET", path, &[("cookie", &cookie)], None).await;
    assert_eq!(plain.status, StatusCode::BAD_REQUEST, "{}", plain.text);
    assert_eq!(plain.body["error"]["field"], "accept");
    // Another service's stream: not for a deploy token of this one.
    server.onboard("other").await;
    let token = server.deploy_token("hello", &["dev"], None).await;
    let refused = send(
        &server,
        "GET",
        "/v1/services/other/environments/dev/watch",
        &[
            ("authorization", &format!("Bearer {token}")),
            ("accept", "text/event-stream"),
        ],
        None,
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);

    let mut sender = connect(&server).await;
    let response = sender
        .send_request(request(
            "GET",
            path,
            &[("cookie", &cookie), ("accept", "text/event-stream")],
            None,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut body = response.into_body();
    let first = read_until(&mut body, "event: deployments").await;
    assert!(first.contains("event: status"), "{first}");
    assert!(first.contains("\"service\":\"hello\""), "{first}");

    // A deploy: the new deployment and its events arrive without asking.
    let deployed = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(deploy_body("hello")),
            202,
        )
        .await;
    let id = deployed["id"].as_i64().unwrap();
    let next = read_until(&mut body, "event: deployment_events").await;
    assert!(next.contains("event: deployments"), "{next}");
    assert!(next.contains(&format!("\"deployment\":{id}")), "{next}");

    // Signing out ends the stream, saying why.
    let out = send(
        &server,
        "DELETE",
        "/v1/session",
        &[("cookie", &cookie), CONSOLE],
        None,
    )
    .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    let end = read_until(&mut body, "event: end").await;
    assert!(end.contains("signed out"), "{end}");
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the stream did not close after its end");
}

#[tokio::test]
async fn the_console_routes_refuse_as_every_route_does() {
    let server = start().await;
    server.onboard("hello").await;
    let routes = [
        ("POST", "/v1/session"),
        ("DELETE", "/v1/session"),
        ("GET", "/v1/services/hello/environments/dev/watch"),
    ];
    let (unknown, _) = runway_secrets::Token::generate(runway_secrets::TokenKind::Admin).unwrap();
    let bearer = |token: &str| format!("Bearer {token}");
    for (method, path) in routes {
        let mut messages = Vec::new();
        for token in [
            None,
            Some("runway_admin_not-a-token"),
            Some("garbage"),
            Some(unknown.expose()),
        ] {
            let auth = token.map(bearer);
            let headers: Vec<(&str, &str)> =
                auth.iter().map(|a| ("authorization", a.as_str())).collect();
            let body = (method == "POST").then(|| json!({}));
            let reply = send(&server, method, path, &headers, body).await;
            assert_eq!(
                reply.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} {token:?}: {}",
                reply.text
            );
            messages.push(reply.message().to_owned());
        }
        messages.dedup();
        assert_eq!(messages.len(), 1, "{method} {path}: {messages:?}");
        // The admin's token is no failure inside: a session, "not a session", or "not a stream".
        let admin = bearer(&server.admin);
        let reply = send(&server, method, path, &[("authorization", &admin)], None).await;
        assert!(
            matches!(reply.status.as_u16(), 201 | 400),
            "{method} {path}: {}",
            reply.text
        );
    }
    // The admin's token still works: signing out with it revoked nothing.
    server.admin("GET", "/v1/whoami", None, 200).await;
}
