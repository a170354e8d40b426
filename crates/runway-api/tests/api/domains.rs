//! Custom domains through the API: mapped by an admin, listed with their certificate's state,
//! refused when they are not a name of their own, gone with their service.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::start;

#[tokio::test]
async fn an_admin_maps_a_domain_and_a_tenant_sees_only_its_own() {
    let server = start().await;
    server.onboard("hello").await;
    server.onboard("other").await;

    let added = server
        .admin(
            "POST",
            "/v1/domains",
            Some(json!({"domain": "WWW.Example.com.", "service": "hello", "env": "dev"})),
            201,
        )
        .await;
    assert_eq!(added["domain"], "www.example.com");
    assert_eq!(added["state"], "pending");
    // This test platform has no ACME directory: the answer says what is served instead.
    assert!(
        added["detail"].as_str().unwrap().contains("domains.acme"),
        "{added}"
    );
    assert!(
        added["url"]
            .as_str()
            .unwrap()
            .starts_with("https://www.example.com")
    );
    server
        .admin(
            "POST",
            "/v1/domains",
            Some(json!({"domain": "api.other.example", "service": "other", "env": "dev"})),
            201,
        )
        .await;

    // A second mapping of the name, to anyone, is a conflict naming who has it.
    let taken = server
        .call(
            "POST",
            "/v1/domains",
            Some(&server.admin),
            Some(json!({"domain": "www.example.com", "service": "other", "env": "dev"})),
        )
        .await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "{}", taken.text);
    assert!(taken.message().contains("hello"), "{}", taken.text);

    // A tenant's deploy token lists its own service's domains only, and cannot map one.
    let token = server.deploy_token("other", &["dev"], None).await;
    let listed = server.call("GET", "/v1/domains", Some(&token), None).await;
    assert_eq!(listed.status, StatusCode::OK);
    let names: Vec<&str> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["api.other.example"]);
    let claimed = server
        .call(
            "POST",
            "/v1/domains",
            Some(&token),
            Some(json!({"domain": "login.example.com", "service": "other", "env": "dev"})),
        )
        .await;
    assert_eq!(claimed.status, StatusCode::FORBIDDEN, "{}", claimed.text);
    // Another service's domain is not there for it.
    let removed = server
        .call("DELETE", "/v1/domains/www.example.com", Some(&token), None)
        .await;
    assert_eq!(removed.status, StatusCode::NOT_FOUND, "{}", removed.text);

    let all = server.admin("GET", "/v1/domains", None, 200).await;
    assert_eq!(all.as_array().unwrap().len(), 2);

    // Removed by the admin, then gone; removing again is a 404.
    let answer = server
        .call(
            "DELETE",
            "/v1/domains/www.example.com",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.text);
    let answer = server
        .call(
            "DELETE",
            "/v1/domains/www.example.com",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);

    // Decommissioning a service takes its domains with it.
    server
        .admin("DELETE", "/v1/services/other?confirm=other", None, 200)
        .await;
    let all = server.admin("GET", "/v1/domains", None, 200).await;
    assert!(all.as_array().unwrap().is_empty(), "{all}");

    let audit = server.admin("GET", "/v1/audit", None, 200).await;
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .filter(|a| a.starts_with("domain."))
        .collect();
    assert_eq!(actions, ["domain.add", "domain.add", "domain.remove"]);
}

#[tokio::test]
async fn a_domain_that_is_not_a_name_of_its_own_is_refused_with_its_field() {
    let server = start().await;
    server.onboard("hello").await;
    for (domain, service, env, field) in [
        ("*.example.com", "hello", "dev", "domain"),
        ("hello.dev.localhost", "hello", "dev", "domain"),
        ("10.0.0.1", "hello", "dev", "domain"),
        ("bad_name.example", "hello", "dev", "domain"),
        ("a.example.com", "nope", "dev", "service"),
        ("a.example.com", "hello", "qa", "env"),
    ] {
        let body = json!({"domain": domain, "service": service, "env": env});
        let answer = server
            .call(
                "POST",
                "/v1/domains",
                Some(&server.admin),
                Some(body.clone()),
            )
            .await;
        assert!(answer.status.is_client_error(), "{body}: {}", answer.text);
        assert_eq!(answer.field(), field, "{body}: {}", answer.text);
    }
    let missing = server
        .call(
            "POST",
            "/v1/domains",
            Some(&server.admin),
            Some(json!({"domain": "a.example.com", "service": "hello"})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert!(missing.message().contains("`env`"), "{}", missing.text);
    let all = server.admin("GET", "/v1/domains", None, 200).await;
    assert!(all.as_array().unwrap().is_empty());
}
