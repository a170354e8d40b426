//! The access table (`runway_api::access::ROUTES`) walked: every route of the contract and the
//! console has an entry, and every route answers every role as its entry says, allowed or
//! refused, through the real router.

use std::collections::BTreeSet;

use hyper::StatusCode;
use runway_api::access::{Needs, On, ROUTES, RouteAccess};
use serde_json::{Value, json};

use crate::support::{Server, deploy_body, start};

/// The console's routes, which are pages and not in the contract.
const CONSOLE: [(&str, &str); 4] = [
    ("GET", "/"),
    ("GET", "/ui"),
    ("GET", "/ui/"),
    ("GET", "/ui/{*path}"),
];

#[test]
fn every_route_has_one_entry_and_every_entry_is_a_route() {
    let doc = runway_api::openapi::openapi();
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes.extend(CONSOLE.map(|(m, p)| (m.to_owned(), p.to_owned())));
    let table: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(table.len(), ROUTES.len(), "a route is in the table twice");
    let missing: Vec<_> = routes.difference(&table).collect();
    assert!(missing.is_empty(), "routes with no entry: {missing:?}");
    let stale: Vec<_> = table.difference(&routes).collect();
    assert!(stale.is_empty(), "entries with no route: {stale:?}");
    // The document says the same, operation by operation.
    for r in ROUTES
        .iter()
        .filter(|r| !CONSOLE.contains(&(r.method, r.path)))
    {
        let said = &doc["paths"][r.path][r.method.to_lowercase()]["x-runway-access"];
        assert_eq!(said["needs"], json!(r.needs), "{} {}", r.method, r.path);
    }
}

/// docs/access.md lists the table as the code has it.
#[test]
fn the_guide_lists_the_table() {
    const START: &str = "<!-- generated: the access table";
    const END: &str = "<!-- end of the access table -->";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/access.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(START).unwrap();
    let start = start + text[start..].find('\n').unwrap() + 1;
    let end = text.find(END).unwrap();
    let mut table = String::from("\n| Method | Path | Needs | On |\n|---|---|---|---|\n");
    for r in ROUTES {
        let name = |v: Value| v.as_str().unwrap().to_owned();
        table.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            r.method,
            r.path,
            name(json!(r.needs)),
            name(json!(r.on)).replace('_', "\\_")
        ));
    }
    table.push('\n');
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        let updated = format!("{}{table}{}", &text[..start], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        text[start..end],
        table,
        "docs/access.md differs from the table: run `UPDATE_GENERATED=1 cargo test -p runway-api --test api access`"
    );
}

#[tokio::test]
async fn the_table_is_served() {
    let server = start().await;
    let answer = server.call("GET", "/v1/access", None, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(answer.body.as_array().unwrap().len(), ROUTES.len());
    assert!(answer.body.as_array().unwrap().contains(&json!({
        "method": "PUT",
        "path": "/v1/services/{service}/environments/{env}/secrets/{name}",
        "needs": "maintainer",
        "on": "path_env",
    })));
}

/// What a token may do on service `hello` (and its team `web`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Nothing,
    Viewer,
    Deployer,
    Maintainer,
    Admin,
}

struct Caller {
    name: &'static str,
    token: String,
    /// On `hello`.
    level: Level,
    /// On team `web`, which owns `hello`: it sees the team.
    in_team: bool,
    /// A role on every service (what reading across services needs).
    everywhere: bool,
}

/// A role token made by the admin.
async fn role_token(server: &Server, name: &str, grant: Value) -> String {
    let created = server
        .admin(
            "POST",
            "/v1/tokens",
            Some(json!({"name": name, "scope": {"role": grant}})),
            201,
        )
        .await;
    created["token"].as_str().unwrap().to_owned()
}

fn needed(needs: Needs) -> Option<Level> {
    match needs {
        Needs::Public | Needs::Signed => None,
        Needs::Viewer => Some(Level::Viewer),
        Needs::Deployer => Some(Level::Deployer),
        Needs::Maintainer => Some(Level::Maintainer),
        Needs::Admin => Some(Level::Admin),
    }
}

/// Whether `caller` may call `route`, as the table says.
fn allowed(route: &RouteAccess, caller: &Caller) -> bool {
    let Some(need) = needed(route.needs) else {
        return true;
    };
    if caller.level == Level::Admin {
        return true;
    }
    match route.on {
        _ if need == Level::Admin => false,
        // A list answers everyone, with what they may see.
        On::Each => true,
        On::Platform => caller.everywhere && need == Level::Viewer,
        // A team is its members'.
        _ if route.path.starts_with("/v1/teams/") => caller.in_team,
        _ => caller.level >= need,
    }
}

/// A body that passes the request's parsing, so the answer is the check's.
fn body(route: &RouteAccess, n: usize) -> Option<Value> {
    Some(match (route.method, route.path) {
        ("GET" | "DELETE", _) => return None,
        ("POST", "/v1/tokens") => {
            json!({"name": format!("t{n}"), "scope": {"role": {"role": "viewer", "service": "hello"}}})
        }
        ("POST", "/v1/domains") => {
            json!({"domain": format!("d{n}.example.com"), "service": "hello", "env": "dev"})
        }
        ("POST", "/v1/services") => json!({"name": format!("new-{n}")}),
        ("POST", "/v1/services/{service}/promote") => json!({"from": "dev", "to": "staging"}),
        ("POST", "/v1/inventory") => json!({"document": "services: []\n"}),
        ("POST", "/v1/services/{service}/environments/{env}/deployments") => deploy_body("hello"),
        ("POST", "/v1/services/{service}/environments/{env}/rollout") => json!({"action": "pause"}),
        ("POST", "/v1/services/{service}/environments/{env}/rollback") => json!({}),
        ("PUT", "/v1/services/{service}/environments/{env}/secrets/{name}") => {
            json!({"value": "v"})
        }
        ("PUT", "/v1/teams/{team}") => json!({"members": []}),
        _ => json!({}),
    })
}

#[tokio::test]
async fn every_route_answers_each_role_as_the_table_says() {
    let server = start().await;
    server.onboard("hello").await;
    server.onboard("other").await;
    server
        .admin("PUT", "/v1/teams/web", Some(json!({"members": []})), 200)
        .await;
    server
        .admin(
            "PATCH",
            "/v1/services/hello",
            Some(json!({"team": "web"})),
            200,
        )
        .await;
    let deployed = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(deploy_body("hello")),
            202,
        )
        .await;
    let deployment = deployed["id"].as_i64().unwrap();
    let victim = server
        .admin(
            "POST",
            "/v1/tokens",
            Some(json!({"name": "victim", "scope": {"role": {"role": "viewer", "service": "hello"}}})),
            201,
        )
        .await["info"]["id"]
        .as_i64()
        .unwrap();

    let callers = vec![
        Caller {
            name: "stranger",
            token: role_token(
                &server,
                "stranger",
                json!({"role": "maintainer", "service": "other"}),
            )
            .await,
            level: Level::Nothing,
            in_team: false,
            everywhere: false,
        },
        Caller {
            name: "viewer",
            token: role_token(
                &server,
                "viewer",
                json!({"role": "viewer", "service": "hello"}),
            )
            .await,
            level: Level::Viewer,
            in_team: false,
            everywhere: false,
        },
        Caller {
            name: "every-viewer",
            token: role_token(
                &server,
                "every-viewer",
                json!({"role": "viewer", "every_service": true}),
            )
            .await,
            level: Level::Viewer,
            in_team: false,
            everywhere: true,
        },
        Caller {
            name: "deployer",
            token: role_token(
                &server,
                "deployer",
                json!({"role": "deployer", "service": "hello"}),
            )
            .await,
            level: Level::Deployer,
            in_team: false,
            everywhere: false,
        },
        Caller {
            name: "team-deployer",
            token: role_token(
                &server,
                "team-deployer",
                json!({"role": "deployer", "team": "web"}),
            )
            .await,
            level: Level::Deployer,
            in_team: true,
            everywhere: false,
        },
        Caller {
            name: "maintainer",
            token: role_token(
                &server,
                "maintainer",
                json!({"role": "maintainer", "service": "hello"}),
            )
            .await,
            level: Level::Maintainer,
            in_team: false,
            everywhere: false,
        },
        Caller {
            name: "admin",
            token: server.admin.clone(),
            level: Level::Admin,
            in_team: true,
            everywhere: true,
        },
    ];

    // Decommissioning `hello` goes last.
    let mut routes: Vec<&RouteAccess> = ROUTES.iter().collect();
    routes.sort_by_key(|r| (r.method, r.path) == ("DELETE", "/v1/services/{service}"));
    let mut n = 0;
    let mut checked = 0;
    for route in routes {
        let path = route
            .path
            .replace("{service}", "hello")
            .replace("{env}", "dev")
            .replace("{name}", "API_KEY")
            .replace("{team}", "web")
            .replace("{domain}", "www.example.com")
            .replace("{*path}", "app.js")
            .replace(
                "/v1/deployments/{id}",
                &format!("/v1/deployments/{deployment}"),
            )
            .replace("/v1/tokens/{id}", &format!("/v1/tokens/{victim}"))
            .replace(
                "{digest}",
                "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            );
        assert!(
            !path.contains('{'),
            "a path parameter the test does not fill: {path}"
        );
        for caller in &callers {
            n += 1;
            if route.path == "/v1/domains/{domain}" {
                // Each removal finds it there.
                server
                    .call(
                        "POST",
                        "/v1/domains",
                        Some(&server.admin),
                        Some(
                            json!({"domain": "www.example.com", "service": "hello", "env": "dev"}),
                        ),
                    )
                    .await;
            }
            let answer = server
                .call(route.method, &path, Some(&caller.token), body(route, n))
                .await;
            let status = answer.status;
            let what = format!(
                "{} {} as {}: {} {}",
                route.method, route.path, caller.name, status, answer.text
            );
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{what}");
            assert!(status.as_u16() < 500, "{what}");
            if allowed(route, caller) {
                assert_ne!(status, StatusCode::FORBIDDEN, "{what}");
                if route.on == On::Found {
                    // What the handler finds is there for whoever may act on it.
                    assert_ne!(status, StatusCode::NOT_FOUND, "{what}");
                }
            } else if route.on == On::Found {
                // Another service's thing is refused, or not there at all for a stranger.
                assert!(
                    matches!(status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
                    "{what}"
                );
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "{what}");
                assert!(!answer.message().contains("other"), "{what}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, ROUTES.len() * callers.len());
}

/// A list shows each caller what it has a role on, and nothing else.
#[tokio::test]
async fn lists_show_what_each_role_reaches() {
    let server = start().await;
    for name in ["hello", "other", "third"] {
        server.onboard(name).await;
    }
    server
        .admin("PUT", "/v1/teams/web", Some(json!({"members": []})), 200)
        .await;
    server
        .admin(
            "PATCH",
            "/v1/services/third",
            Some(json!({"team": "web"})),
            200,
        )
        .await;
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (grant, expected) in [
        (json!({"role": "viewer", "service": "hello"}), vec!["hello"]),
        (json!({"role": "deployer", "team": "web"}), vec!["third"]),
        (
            json!({"role": "viewer", "every_service": true}),
            vec!["hello", "other", "third"],
        ),
    ] {
        let token = role_token(&server, "lister", grant.clone()).await;
        let list = server.call("GET", "/v1/services", Some(&token), None).await;
        assert_eq!(names(&list.body), expected, "{grant}");
        let teams = server.call("GET", "/v1/teams", Some(&token), None).await;
        let in_web = grant.get("team").is_some();
        assert_eq!(
            names(&teams.body),
            if in_web { vec!["web"] } else { vec![] },
            "{grant}"
        );
    }
    // A maintainer lists and revokes its service's tokens, not another's.
    let maintainer = role_token(
        &server,
        "m",
        json!({"role": "maintainer", "service": "hello"}),
    )
    .await;
    let tokens = server
        .call("GET", "/v1/tokens", Some(&maintainer), None)
        .await;
    for t in tokens.body.as_array().unwrap() {
        let scope = &t["scope"];
        assert!(
            scope["role"]["service"] == "hello" || scope["deploy"]["service"] == "hello",
            "{t}"
        );
    }
    // It makes tokens on its service up to its own role, and none elsewhere.
    for (grant, status) in [
        (
            json!({"role": "maintainer", "service": "hello"}),
            StatusCode::CREATED,
        ),
        (
            json!({"role": "viewer", "service": "other"}),
            StatusCode::FORBIDDEN,
        ),
        (
            json!({"role": "viewer", "team": "web"}),
            StatusCode::FORBIDDEN,
        ),
        (
            json!({"role": "viewer", "every_service": true}),
            StatusCode::FORBIDDEN,
        ),
    ] {
        let made = server
            .call(
                "POST",
                "/v1/tokens",
                Some(&maintainer),
                Some(json!({"name": "made", "scope": {"role": grant}})),
            )
            .await;
        assert_eq!(made.status, status, "{grant}: {}", made.text);
    }
    let admin = server
        .call(
            "POST",
            "/v1/tokens",
            Some(&maintainer),
            Some(json!({"name": "made", "scope": {"admin": {}}})),
        )
        .await;
    assert_eq!(admin.status, StatusCode::FORBIDDEN, "{}", admin.text);
    // A role names exactly one of a service, a team and every service.
    let both = server
        .admin_call(json!({"role": "viewer", "service": "hello", "team": "web"}))
        .await;
    assert_eq!(both.status, StatusCode::BAD_REQUEST, "{}", both.text);
    assert_eq!(both.field(), "scope.role", "{}", both.text);
}

impl Server {
    /// Makes a token with `grant` as the admin.
    async fn admin_call(&self, grant: Value) -> crate::support::Answer {
        self.call(
            "POST",
            "/v1/tokens",
            Some(&self.admin),
            Some(json!({"name": "t", "scope": {"role": grant}})),
        )
        .await
    }
}

/// A token a non-admin makes lives no longer than its maker and goes when its maker is
/// revoked; an empty list of environments is refused before anything is looked up.
#[tokio::test]
async fn what_a_maintainer_makes_is_bounded_by_it() {
    let server = start().await;
    server.onboard("hello").await;
    let maker = server
        .admin(
            "POST",
            "/v1/tokens",
            Some(json!({"name": "m", "expires_in_seconds": 600,
                "scope": {"role": {"role": "maintainer", "service": "hello"}}})),
            201,
        )
        .await;
    let (maker_id, maker) = (
        maker["info"]["id"].as_i64().unwrap(),
        maker["token"].as_str().unwrap().to_owned(),
    );
    let make = |expires: Option<u64>| {
        let mut body =
            json!({"name": "made", "scope": {"role": {"role": "viewer", "service": "hello"}}});
        if let Some(seconds) = expires {
            body["expires_in_seconds"] = json!(seconds);
        }
        body
    };
    for longer in [None, Some(3600)] {
        let refused = server
            .call("POST", "/v1/tokens", Some(&maker), Some(make(longer)))
            .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
        assert_eq!(refused.field(), "expires_in_seconds", "{}", refused.text);
    }
    let made = server
        .call("POST", "/v1/tokens", Some(&maker), Some(make(Some(60))))
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let made = made.body["token"].as_str().unwrap().to_owned();
    assert_eq!(
        server
            .call("GET", "/v1/services/hello", Some(&made), None)
            .await
            .status,
        StatusCode::OK
    );
    server
        .admin("DELETE", &format!("/v1/tokens/{maker_id}"), None, 200)
        .await;
    assert_eq!(
        server
            .call("GET", "/v1/services/hello", Some(&made), None)
            .await
            .status,
        StatusCode::UNAUTHORIZED,
        "what a revoked token made goes with it"
    );
    // No environment at all, for a service that exists or not: the same 400.
    for service in ["hello", "nope"] {
        let empty = server
            .call(
                "POST",
                "/v1/tokens",
                Some(&server.admin),
                Some(json!({"name": "e", "scope": {"deploy": {"service": service, "environments": []}}})),
            )
            .await;
        assert_eq!(empty.status, StatusCode::BAD_REQUEST, "{}", empty.text);
        assert_eq!(empty.field(), "scope.deploy.environments", "{}", empty.text);
    }
}
