//! The generated monitoring over the API: the rule file (admin) and a service's dashboard
//! (whoever may read the service), from the serving revisions' manifests.

use hyper::StatusCode;
use serde_json::json;

use crate::support::{deploy_body, start};

#[tokio::test]
async fn rules_and_dashboards_follow_what_serves() {
    let server = start().await;
    server.onboard("hello").await;
    server.onboard("other").await;
    let token = server.deploy_token("hello", &["dev"], None).await;

    let early = server
        .call("GET", "/v1/services/hello/dashboard", Some(&token), None)
        .await;
    assert_eq!(early.status, StatusCode::NOT_FOUND, "{}", early.text);
    assert!(early.message().contains("first deploy"), "{}", early.text);

    let mut body = deploy_body("hello");
    body["manifest"]["spec"]["workload"] = json!({"slo": {"availability_target": 0.995}});
    let deployed = server
        .call(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(&token),
            Some(body),
        )
        .await;
    assert_eq!(deployed.status, StatusCode::ACCEPTED, "{}", deployed.text);

    let rules = server
        .call("GET", "/v1/observability/rules", Some(&server.admin), None)
        .await;
    assert_eq!(rules.status, StatusCode::OK, "{}", rules.text);
    assert_eq!(rules.content_type, "application/yaml");
    assert!(
        rules.text.contains("name: \"runway:hello:dev\""),
        "{}",
        rules.text
    );
    assert!(
        rules.text.contains("RunwayErrorBudgetBurn1h"),
        "{}",
        rules.text
    );
    // The manifest's own objective.
    assert!(
        rules.text.contains("an availability target of 99.5 %"),
        "{}",
        rules.text
    );
    assert!(!rules.text.contains("runway:other"), "{}", rules.text);
    // Every service's rules are the operator's, not a tenant's.
    let refused = server
        .call("GET", "/v1/observability/rules", Some(&token), None)
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);

    let dashboard = server
        .call("GET", "/v1/services/hello/dashboard", Some(&token), None)
        .await;
    assert_eq!(dashboard.status, StatusCode::OK, "{}", dashboard.text);
    assert_eq!(
        dashboard.body["uid"],
        runway_render::observability::dashboard_uid("hello")
    );
    let theirs = server
        .call("GET", "/v1/services/other/dashboard", Some(&token), None)
        .await;
    assert_eq!(theirs.status, StatusCode::FORBIDDEN, "{}", theirs.text);
}

#[tokio::test]
async fn traffic_shows_only_what_the_token_may_read() {
    let server = start().await;
    server.onboard("hello").await;
    server.onboard("other").await;
    let all = server
        .call("GET", "/v1/traffic", Some(&server.admin), None)
        .await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body.as_array().unwrap().len(), 2, "{}", all.text);
    let token = server.deploy_token("hello", &["dev"], None).await;
    let own = server.call("GET", "/v1/traffic", Some(&token), None).await;
    let services: Vec<&str> = own
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["service"].as_str().unwrap())
        .collect();
    assert_eq!(services, ["hello"], "{}", own.text);
    let none = server.call("GET", "/v1/traffic", None, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
}
