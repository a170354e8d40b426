//! Preview environments through the API: a deploy with `preview` makes the service
//! `NAME--PARENT` in `preview`, with its parent's settings for the path's environment, its
//! parent's `preview` secrets and no instance when idle; who may, what names, how many; listed,
//! stopped, gone with their parent.

use axum::http::StatusCode;
use runway_api::config::PreviewsConfig;
use runway_store::Store;
use serde_json::{Value, json};

use crate::support::{Server, deploy_body_with_secrets, start, start_with_previews};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

async fn server(max_per_service: u32) -> Server {
    start_with_previews(
        PreviewsConfig {
            ttl_seconds: 3600,
            max_per_service,
        },
        None,
    )
    .await
}

/// `app`'s deploy body for `staging` as preview `name`, using secret `API_KEY`.
fn preview_body(name: &str) -> Value {
    let mut body = deploy_body_with_secrets("app", &["API_KEY"]);
    body["preview"] = json!(name);
    body
}

const DEPLOY: &str = "/v1/services/app/environments/staging/deployments";

#[tokio::test]
async fn a_preview_runs_its_parents_settings_with_its_preview_secrets_and_scales_to_zero() {
    let server = server(5).await;
    server.onboard("app").await;
    server
        .admin(
            "PUT",
            "/v1/services/app/environments/preview/secrets/API_KEY",
            Some(json!({"value": "for previews"})),
            200,
        )
        .await;
    let deployed = server
        .admin("POST", DEPLOY, Some(preview_body("mr-1")), 202)
        .await;
    assert_eq!(
        (
            &deployed["service"],
            &deployed["env"],
            &deployed["to_revision"]
        ),
        (
            &json!("mr-1--app"),
            &json!("preview"),
            &json!("mr-1--app-preview-00001")
        )
    );
    assert_eq!(deployed["preview"]["name"], "mr-1");
    assert_eq!(deployed["preview"]["base_env"], "staging");
    assert_eq!(
        deployed["preview"]["url"],
        "https://mr-1--app.preview.localhost:8443/"
    );
    let revisions = server
        .admin(
            "GET",
            "/v1/services/mr-1--app/environments/preview/revisions",
            None,
            200,
        )
        .await;
    // The manifest's two instances at least became none: an idle preview runs nothing.
    assert_eq!(
        revisions[0]["manifest"]["spec"]["scalability"]["min_instances"], 0,
        "{revisions}"
    );
    assert_eq!(revisions[0]["secret_versions"]["API_KEY"], 1, "{revisions}");
    // Its secret is its parent's, for `preview`: the value sealed for app/preview opens.
    let sealed = server
        .store
        .secret_read("app", "preview", "API_KEY", 1)
        .unwrap();
    assert!(!sealed.ciphertext.is_empty());

    // `runway env set` on a preview: a new revision with the same settings, still at zero.
    server.finish(deployed["id"].as_i64().unwrap());
    let previews_token = server.deploy_token("app", &["preview"], None).await;
    let changed = server
        .call(
            "POST",
            "/v1/services/mr-1--app/environments/preview/variables",
            Some(&previews_token),
            Some(json!({"set": {"MODE": "review"}})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::ACCEPTED, "{}", changed.text);
    assert_eq!(changed.body["to_revision"], "mr-1--app-preview-00002");
    let revisions = server
        .admin(
            "GET",
            "/v1/services/mr-1--app/environments/preview/revisions",
            None,
            200,
        )
        .await;
    let second = revisions
        .as_array()
        .and_then(|all| all.iter().find(|r| r["number"] == 2))
        .unwrap_or_else(|| panic!("{revisions}"));
    assert_eq!(second["env_vars"]["MODE"], "review", "{second}");
    assert_eq!(
        second["manifest"]["spec"]["scalability"]["min_instances"],
        0
    );
    assert_eq!(second["secret_versions"]["API_KEY"], 1, "{second}");
    server.finish(changed.body["id"].as_i64().unwrap());

    // It is listed with its parent, not among the services.
    let listed = server
        .admin("GET", "/v1/services/app/previews", None, 200)
        .await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["service"], "mr-1--app");
    let services = server.admin("GET", "/v1/services", None, 200).await;
    assert!(!services.to_string().contains("mr-1--app"), "{services}");
    let all = server.admin("GET", "/v1/previews", None, 200).await;
    assert_eq!(all, listed);

    // Without the preview secret, a preview of a manifest that uses it is refused, and leaves
    // no preview behind.
    server
        .admin(
            "DELETE",
            "/v1/services/app/environments/preview/secrets/API_KEY",
            None,
            204,
        )
        .await;
    let refused = server
        .call(
            "POST",
            DEPLOY,
            Some(&server.admin),
            Some(preview_body("mr-2")),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert!(
        refused.message().contains("not set for app in preview"),
        "{}",
        refused.text
    );
    let listed = server
        .admin("GET", "/v1/services/app/previews", None, 200)
        .await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

#[tokio::test]
async fn who_may_deploy_a_preview_what_it_may_be_named_and_how_many() {
    let server = server(2).await;
    server.onboard("app").await;
    server
        .admin(
            "POST",
            "/v1/services",
            Some(json!({"name": "solo", "owners": ["bob"], "environments": ["staging"]})),
            201,
        )
        .await;
    let body = |name: &str| {
        let mut body = crate::support::deploy_body("app");
        body["preview"] = json!(name);
        body
    };
    let status = |answer: &crate::support::Answer| (answer.status, answer.field().to_owned());

    // Leave to act in `preview` is what a preview needs; staging's is not.
    let staging = server.deploy_token("app", &["staging"], None).await;
    let previews = server.deploy_token("app", &["preview"], None).await;
    let answer = server
        .call("POST", DEPLOY, Some(&staging), Some(body("mr-1")))
        .await;
    assert_eq!(
        status(&answer),
        (StatusCode::FORBIDDEN, "preview".to_owned()),
        "{}",
        answer.text
    );
    let answer = server
        .call("POST", DEPLOY, Some(&previews), Some(body("mr-1")))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.text);
    // …and it acts on its service's previews, not on the service.
    let answer = server
        .call(
            "POST",
            DEPLOY,
            Some(&previews),
            Some(crate::support::deploy_body("app")),
        )
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.text);
    let status_of = server
        .call(
            "GET",
            "/v1/services/mr-1--app/environments/preview/status",
            Some(&previews),
            None,
        )
        .await;
    assert_eq!(status_of.status, StatusCode::OK, "{}", status_of.text);

    // `preview` itself takes no deploy but a preview's, and previews are not promoted.
    let direct = server
        .call(
            "POST",
            "/v1/services/app/environments/preview/deployments",
            Some(&server.admin),
            Some(crate::support::deploy_body("app")),
        )
        .await;
    assert_eq!(
        status(&direct),
        (StatusCode::BAD_REQUEST, "env".to_owned()),
        "{}",
        direct.text
    );
    let promote = server
        .call(
            "POST",
            "/v1/services/app/promote",
            Some(&server.admin),
            Some(json!({"from": "preview", "to": "production"})),
        )
        .await;
    assert_eq!(promote.status, StatusCode::BAD_REQUEST, "{}", promote.text);
    assert!(
        promote.message().contains("not promoted"),
        "{}",
        promote.text
    );

    // Names: a DNS label without `--`, short enough for a host name; a preview has none.
    for name in ["Mr_1", "a--b", "-x", &"x".repeat(60)] {
        let answer = server
            .call("POST", DEPLOY, Some(&server.admin), Some(body(name)))
            .await;
        assert_eq!(
            status(&answer),
            (StatusCode::BAD_REQUEST, "preview".to_owned()),
            "{name}: {}",
            answer.text
        );
    }
    let nested = server
        .call(
            "POST",
            "/v1/services/mr-1--app/environments/preview/deployments",
            Some(&server.admin),
            Some(body("x")),
        )
        .await;
    assert_eq!(nested.status, StatusCode::BAD_REQUEST, "{}", nested.text);
    // A service's own name cannot look like a preview's.
    let answer = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "mr-2--app", "owners": []})),
        )
        .await;
    assert_eq!(
        status(&answer),
        (StatusCode::BAD_REQUEST, "name".to_owned()),
        "{}",
        answer.text
    );
    // A service not onboarded in `preview` has none.
    let mut solo = crate::support::deploy_body("solo");
    solo["preview"] = json!("mr-1");
    let answer = server
        .call(
            "POST",
            "/v1/services/solo/environments/staging/deployments",
            Some(&server.admin),
            Some(solo),
        )
        .await;
    assert_eq!(
        status(&answer),
        (StatusCode::CONFLICT, "preview".to_owned()),
        "{}",
        answer.text
    );
    assert!(
        answer.message().contains("--add-env preview"),
        "{}",
        answer.text
    );

    // Two at most: a third is refused until one stops.
    server.admin("POST", DEPLOY, Some(body("mr-2")), 202).await;
    let third = server
        .call("POST", DEPLOY, Some(&server.admin), Some(body("mr-3")))
        .await;
    assert_eq!(third.status, StatusCode::CONFLICT, "{}", third.text);
    assert!(
        third.message().contains("app has 2 previews"),
        "{}",
        third.text
    );
    let stopped = server
        .call(
            "DELETE",
            "/v1/services/app/previews/mr-1",
            Some(&previews),
            None,
        )
        .await;
    assert_eq!(stopped.status, StatusCode::OK, "{}", stopped.text);
    assert_eq!(stopped.body["decommissioned"], "mr-1--app");
    let again = server
        .call(
            "DELETE",
            "/v1/services/app/previews/mr-1",
            Some(&previews),
            None,
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "{}", again.text);
    server.admin("POST", DEPLOY, Some(body("mr-3")), 202).await;
    // Listing every service's previews shows a token its own service's.
    server.onboard("other").await;
    let all = server
        .call("GET", "/v1/previews", Some(&previews), None)
        .await;
    let parents: Vec<&str> = all
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["parent"].as_str().unwrap())
        .collect();
    assert!(
        !parents.is_empty() && parents.iter().all(|p| *p == "app"),
        "{}",
        all.text
    );

    // The parent's decommission takes its previews.
    server
        .admin("DELETE", "/v1/services/app?confirm=app", None, 200)
        .await;
    assert!(server.store.preview_list(None).unwrap().is_empty());
    assert!(server.store.service_get("mr-2--app").is_err());
}

#[tokio::test]
async fn a_process_preview_runs_its_parents_code_as_a_snapshot_of_its_own() {
    let server = server(5).await;
    server.onboard("app").await;
    let taken = server.upload("app", DIGEST, b"snapshot").await;
    assert_eq!(taken.status, StatusCode::CREATED, "{}", taken.text);
    let body = json!({
        "manifest": {
            "apiVersion": "runway/v1", "kind": "RunwayService", "metadata": {"name": "app"},
            "spec": {"container_port": 8080, "workload": {"process": {"command": ["python3", "app.py"]}}}
        },
        "source": DIGEST,
        "preview": "mr-7",
    });
    server.admin("POST", DEPLOY, Some(body), 202).await;
    let app = server.store.service_get("app").unwrap().id;
    let preview = server.store.service_get("mr-7--app").unwrap().id;
    assert_ne!(app, preview);
    let sources = server.platform.sources.lock().unwrap();
    assert_eq!(
        sources.get(&(preview, DIGEST.to_owned())),
        sources.get(&(app, DIGEST.to_owned()))
    );
    assert!(sources.contains_key(&(preview, DIGEST.to_owned())));
}

#[tokio::test]
async fn a_server_without_a_preview_environment_has_no_previews() {
    let server = start().await;
    server.onboard("app").await;
    let answer = server
        .call(
            "POST",
            DEPLOY,
            Some(&server.admin),
            Some(preview_body("mr-1")),
        )
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
    assert!(
        answer.message().contains("has no previews"),
        "{}",
        answer.text
    );
}
