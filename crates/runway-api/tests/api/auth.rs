//! Authentication on every route, and what a deploy token may do.

use hyper::StatusCode;
use runway_secrets::{Token, TokenKind};
use serde_json::json;

use crate::support::{deploy_body, start};

/// Every (method, path) of the OpenAPI document, path parameters filled in.
fn documented_routes() -> Vec<(String, String, bool)> {
    let doc = runway_api::openapi::openapi();
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let filled = path
                .replace("{service}", "hello")
                .replace("{env}", "dev")
                .replace("{name}", "API_KEY")
                .replace("{id}", "1")
                .replace("{domain}", "www.example.com")
                .replace("{team}", "web")
                .replace(
                    "{digest}",
                    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                );
            assert!(
                !filled.contains('{'),
                "a path parameter the test does not know: {path}"
            );
            let public = runway_api::openapi::PUBLIC_PATHS.contains(&path.as_str());
            routes.push((method.to_uppercase(), filled, public));
        }
    }
    routes
}

#[tokio::test]
async fn every_route_but_the_public_ones_refuses_a_missing_or_wrong_token() {
    let server = start().await;
    server.onboard("hello").await;
    let routes = documented_routes();
    assert!(routes.len() >= 22, "{routes:?}");
    let (unknown, _) = Token::generate(TokenKind::Admin).unwrap();
    let wrong = [
        None,
        Some("runway_admin_not-a-token".to_owned()),
        Some("garbage".to_owned()),
        Some(unknown.expose().to_owned()),
    ];
    for (method, path, public) in &routes {
        let mut messages = Vec::new();
        for token in &wrong {
            let body = (method != "GET" && method != "DELETE").then(|| json!({}));
            let answer = server.call(method, path, token.as_deref(), body).await;
            if *public {
                // Single sign-on's answer 404 here, where it is not set up.
                assert!(
                    answer.status == StatusCode::OK
                        || (path.starts_with("/v1/sso/")
                            && answer.status.is_client_error()
                            && answer.status != StatusCode::UNAUTHORIZED),
                    "{method} {path}: {}",
                    answer.text
                );
            } else {
                assert_eq!(
                    answer.status,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} {token:?}: {}",
                    answer.text
                );
                assert_eq!(answer.code(), "unauthorized");
                messages.push(answer.message().to_owned());
            }
        }
        // Malformed and unknown tokens are told apart by nothing.
        messages.dedup();
        assert!(messages.len() <= 1, "{method} {path}: {messages:?}");
    }
}

#[tokio::test]
async fn every_route_works_for_the_admin() {
    let server = start().await;
    server.onboard("hello").await;
    for (method, path, _) in documented_routes() {
        // Not the admin's own token (id 1).
        let path = path.replace("/v1/tokens/1", "/v1/tokens/999");
        let answer = server.call(&method, &path, Some(&server.admin), None).await;
        // Without bodies some refuse the input or find nothing; none refuses the admin's
        // token, none is missing from the router, none fails inside. (flows.rs makes each
        // succeed with real input.)
        assert!(
            matches!(answer.status.as_u16(), 200..=299 | 400 | 404 | 409 | 422),
            "{method} {path}: {}",
            answer.text
        );
        assert_ne!(answer.message(), "no such route", "{method} {path}");
    }
}

#[tokio::test]
async fn a_deploy_token_stays_in_its_service_and_environments() {
    let server = start().await;
    server.onboard("alpha").await;
    server.onboard("beta").await;
    let token = server.deploy_token("alpha", &["dev"], None).await;
    let t = Some(token.as_str());

    // Its own service, in its environment.
    let ok = server
        .call(
            "POST",
            "/v1/services/alpha/environments/dev/deployments",
            t,
            Some(deploy_body("alpha")),
        )
        .await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.text);
    assert_eq!(ok.body["created_by"], "ci for alpha");
    let secret = server
        .call(
            "PUT",
            "/v1/services/alpha/environments/dev/secrets/API_KEY",
            t,
            Some(json!({"value": "v"})),
        )
        .await;
    // Secrets are a maintainer's: a deploy token is a deployer.
    assert_eq!(secret.status, StatusCode::FORBIDDEN, "{}", secret.text);
    assert!(secret.message().contains("`maintainer`"), "{}", secret.text);
    assert_eq!(
        server
            .call("GET", "/v1/services/alpha", t, None)
            .await
            .status,
        StatusCode::OK
    );
    let whoami = server.call("GET", "/v1/whoami", t, None).await;
    assert_eq!(
        whoami.body["scope"],
        json!({"deploy": {"service": "alpha", "environments": ["dev"]}})
    );

    // It sees only its own service in the listing.
    let list = server.call("GET", "/v1/services", t, None).await;
    let names: Vec<&str> = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha"]);

    // Code for another service: neither looked for nor uploaded.
    let beta_source = "/v1/services/beta/environments/dev/sources/\
                       sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    for method in ["GET", "PUT"] {
        let answer = server
            .raw(method, beta_source, t, Some(b"code".to_vec()))
            .await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{method}: {}",
            answer.text
        );
    }
    assert!(server.platform.sources.lock().unwrap().is_empty());

    // Another service: neither read nor change.
    for (method, path, body) in [
        ("GET", "/v1/services/beta", None),
        ("GET", "/v1/services/beta/environments/dev/revisions", None),
        ("GET", "/v1/services/beta/environments/dev/secrets", None),
        (
            "POST",
            "/v1/services/beta/environments/dev/deployments",
            Some(deploy_body("beta")),
        ),
        (
            "PUT",
            "/v1/services/beta/environments/dev/secrets/API_KEY",
            Some(json!({"value": "v"})),
        ),
        (
            "POST",
            "/v1/services/beta/environments/dev/rollback",
            Some(json!({})),
        ),
    ] {
        let answer = server.call(method, path, t, body).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            answer.text
        );
        assert!(!answer.message().contains("beta"), "{}", answer.text);
    }
    // Another environment of its own service.
    for (method, path, body) in [
        (
            "POST",
            "/v1/services/alpha/environments/production/deployments",
            Some(deploy_body("alpha")),
        ),
        (
            "GET",
            "/v1/services/alpha/environments/staging/status",
            None,
        ),
        (
            "POST",
            "/v1/services/alpha/promote",
            Some(json!({"from": "dev", "to": "staging"})),
        ),
    ] {
        let answer = server.call(method, path, t, body).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            answer.text
        );
    }
    // Tokens are a maintainer's: it sees none, and the admin's is not there for it.
    let tokens = server.call("GET", "/v1/tokens", t, None).await;
    assert_eq!(tokens.body, json!([]), "{}", tokens.text);
    let revoke = server.call("DELETE", "/v1/tokens/1", t, None).await;
    assert_eq!(revoke.status, StatusCode::NOT_FOUND, "{}", revoke.text);

    // Admin actions.
    for (method, path, body) in [
        ("POST", "/v1/services", Some(json!({"name": "gamma"}))),
        (
            "POST",
            "/v1/tokens",
            Some(json!({"name": "x", "scope": {"admin": {}}})),
        ),
        ("GET", "/v1/audit", None),
        ("GET", "/v1/audit/verify", None),
        ("GET", "/v1/audit/export", None),
        ("DELETE", "/v1/services/alpha?confirm=alpha", None),
    ] {
        let answer = server.call(method, path, t, body).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            answer.text
        );
    }
    // A deployment of another service, by id.
    let other = server
        .admin(
            "POST",
            "/v1/services/beta/environments/dev/deployments",
            Some(deploy_body("beta")),
            202,
        )
        .await;
    // It answers exactly as an id that does not exist: nothing tells the one from the other.
    let id = other["id"].as_i64().unwrap();
    let missing = id + 1000;
    for (real, none) in [
        (
            format!("/v1/deployments/{id}"),
            format!("/v1/deployments/{missing}"),
        ),
        (
            format!("/v1/deployments/{id}/events"),
            format!("/v1/deployments/{missing}/events"),
        ),
    ] {
        let real = server.call("GET", &real, t, None).await;
        let none = server.call("GET", &none, t, None).await;
        assert_eq!(real.status, StatusCode::NOT_FOUND, "{}", real.text);
        assert_eq!(
            real.text.replace(&id.to_string(), "N"),
            none.text.replace(&missing.to_string(), "N")
        );
    }
}

#[tokio::test]
async fn expired_and_revoked_tokens_get_401() {
    let server = start().await;
    server.onboard("alpha").await;
    let token = server.deploy_token("alpha", &["dev"], Some(1)).await;
    assert_eq!(
        server
            .call("GET", "/v1/whoami", Some(&token), None)
            .await
            .status,
        StatusCode::OK
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let expired = server.call("GET", "/v1/whoami", Some(&token), None).await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED, "{}", expired.text);

    let created = server
        .admin("POST", "/v1/tokens", Some(json!({"name": "short", "scope": {"deploy": {"service": "alpha", "environments": ["dev"]}}})), 201)
        .await;
    let text = created["token"].as_str().unwrap();
    assert!(text.starts_with("runway_deploy_"));
    assert_eq!(
        server
            .call("GET", "/v1/services/alpha", Some(text), None)
            .await
            .status,
        StatusCode::OK
    );
    let id = created["info"]["id"].as_i64().unwrap();
    let revoked = server
        .admin("DELETE", &format!("/v1/tokens/{id}"), None, 200)
        .await;
    assert!(revoked["revoked_at"].is_string());
    let answer = server
        .call("GET", "/v1/services/alpha", Some(text), None)
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.text);

    // Listing tokens never shows a hash or a token's text.
    let list = server
        .call("GET", "/v1/tokens", Some(&server.admin), None)
        .await;
    assert!(
        !list.text.contains("hash")
            && !list.text.contains(text)
            && !list.text.contains(&server.admin)
    );
}
