//! Each route doing its work, as the admin.

use std::sync::atomic::Ordering;

use hyper::StatusCode;
use runway_store::Store;
use serde_json::json;

use crate::support::{
    SOURCE_LIMIT, deploy_body, deploy_body_with_secrets, manifest, start, start_with,
    start_without_processes,
};

#[tokio::test]
async fn health_whoami_and_services() {
    let server = start().await;
    let health = server.call("GET", "/healthz", None, None).await;
    assert_eq!(health.body, json!({"status": "ok"}));
    let whoami = server.admin("GET", "/v1/whoami", None, 200).await;
    assert_eq!(whoami["name"], "admin");
    assert_eq!(whoami["scope"], json!({"admin": {}}));

    let created = server
        .admin(
            "POST",
            "/v1/services",
            Some(json!({"name": "hello", "owners": ["alice"], "environments": ["dev", "staging"]})),
            201,
        )
        .await;
    assert_eq!(created["environments"], json!(["dev", "staging"]));
    assert_eq!(created["created_by"], "admin");
    let all = server
        .admin("POST", "/v1/services", Some(json!({"name": "world"})), 201)
        .await;
    assert_eq!(all["environments"], json!(["dev", "staging", "production"]));
    let again = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "hello"})),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let bad = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "Hello_World"})),
        )
        .await;
    assert_eq!((bad.status, bad.field()), (StatusCode::BAD_REQUEST, "name"));
    // `---` parts a tag from its service in a host name: such a service would make the
    // ingress refuse the whole route table.
    let tag_like = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "canary---hello"})),
        )
        .await;
    assert_eq!(
        (tag_like.status, tag_like.field()),
        (StatusCode::BAD_REQUEST, "name")
    );
    assert!(tag_like.message().contains("no `---`"), "{}", tag_like.text);
    let unknown_env = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "x", "environments": ["qa"]})),
        )
        .await;
    assert_eq!(
        (unknown_env.status, unknown_env.field()),
        (StatusCode::BAD_REQUEST, "environments")
    );
    let unknown_key = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "x", "colour": "red"})),
        )
        .await;
    assert_eq!(
        unknown_key.status,
        StatusCode::BAD_REQUEST,
        "{}",
        unknown_key.text
    );
    let wrong_type = server
        .call(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(json!({"name": "x", "owners": "alice"})),
        )
        .await;
    assert_eq!(
        (wrong_type.status, wrong_type.field()),
        (StatusCode::BAD_REQUEST, "owners")
    );

    let list = server.admin("GET", "/v1/services", None, 200).await;
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(
        server.admin("GET", "/v1/services/hello", None, 200).await["owners"],
        json!(["alice"])
    );
    let missing = server
        .call("GET", "/v1/services/nope", Some(&server.admin), None)
        .await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let no_route = server.call("GET", "/v2/nothing", None, None).await;
    assert_eq!(
        (no_route.status, no_route.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let not_allowed = server
        .call("PATCH", "/v1/services", Some(&server.admin), None)
        .await;
    assert_eq!(not_allowed.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn deploy_records_a_pinned_revision_and_wakes_the_reconciler() {
    let server = start().await;
    server.onboard("hello").await;
    let deployment = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(deploy_body("hello")),
            202,
        )
        .await;
    assert_eq!(deployment["kind"], "deploy");
    assert_eq!(deployment["state"], "pending");
    assert_eq!(deployment["to_revision"], "hello-dev-00001");
    assert_eq!(deployment["from_revision"], json!(null));
    assert_eq!(server.platform.wakes.load(Ordering::SeqCst), 1);

    let second = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(json!({"manifest": manifest("hello"), "image": "registry.local/hello:2"})),
            409,
        )
        .await;
    assert_eq!(
        second["error"]["code"], "conflict",
        "a deploy while one is pending"
    );

    let revisions = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/revisions",
            None,
            200,
        )
        .await;
    let revision = &revisions[0];
    assert_eq!(revision["number"], 1);
    assert_eq!(
        revision["image"],
        format!("registry.local/hello@sha256:{}", "ab".repeat(32))
    );
    assert_eq!(revision["env_vars"], json!({"GREETING": "hi"}));
    assert_eq!(revision["manifest"], manifest("hello"));

    // The desired state: the new revision, max(min_instances, 1) instances, all the weight.
    let desired = server.store.desired_get("hello", "dev").unwrap().unwrap();
    assert_eq!(desired.revisions.len(), 1);
    assert_eq!(
        (desired.revisions[0].instances, desired.revisions[0].weight),
        (2, 100)
    );

    let id = deployment["id"].as_i64().unwrap();
    let one = server
        .admin("GET", &format!("/v1/deployments/{id}"), None, 200)
        .await;
    assert_eq!(one["id"], id);
    let events = server
        .admin("GET", &format!("/v1/deployments/{id}/events"), None, 200)
        .await;
    assert!(!events.as_array().unwrap().is_empty());
    let after = events.as_array().unwrap().len();
    let none = server
        .admin(
            "GET",
            &format!("/v1/deployments/{id}/events?after={after}"),
            None,
            200,
        )
        .await;
    assert_eq!(none, json!([]));
    let list = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/deployments?limit=5",
            None,
            200,
        )
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(
        server
            .call("GET", "/v1/deployments/999", Some(&server.admin), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let bad_limit = server
        .call(
            "GET",
            "/v1/services/hello/environments/dev/deployments?limit=x",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(bad_limit.status, StatusCode::BAD_REQUEST);

    // Status: desired from the store, the rest from the platform.
    let status = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/status",
            None,
            200,
        )
        .await;
    assert_eq!(
        status["desired"],
        json!([{"revision": "hello-dev-00001", "instances": 2, "weight": 100}])
    );
    assert_eq!(status["url"], "https://hello.dev.localhost:8443/");
    assert_eq!(status["instances"][0]["phase"], "running");
    assert_eq!(status["revisions"][0]["condition"], "ready");
    assert!(status.get("warnings").is_none(), "{status}");

    // Logs, and followed logs as NDJSON.
    let logs = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/logs?lines=2",
            None,
            200,
        )
        .await;
    assert_eq!(logs.as_array().unwrap().len(), 2);
    assert_eq!(logs[0]["stream"], "stdout");
    let follow = server
        .call(
            "GET",
            "/v1/services/hello/environments/dev/logs?follow=true",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(follow.content_type, "application/x-ndjson");
    let lines: Vec<serde_json::Value> = follow
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["text"], "line 2");

    // `since`: a time (the fake's lines are from 13:50:39.123) or a duration before now.
    let logs_since = |since: &'static str| {
        let server = &server;
        async move {
            let path = format!("/v1/services/hello/environments/dev/logs?since={since}");
            server.call("GET", &path, Some(&server.admin), None).await
        }
    };
    for (since, count) in [
        ("2026-11-21T13:50:39Z", 3),
        ("2026-11-21T13:50:40Z", 0),
        ("1d", 0),
        ("100000d", 3),
    ] {
        let answer = logs_since(since).await;
        assert_eq!(answer.status, StatusCode::OK, "{since}: {}", answer.text);
        let lines: serde_json::Value = serde_json::from_str(&answer.text).unwrap();
        assert_eq!(lines.as_array().unwrap().len(), count, "since={since}");
    }
    let bad = logs_since("yesterday").await;
    assert_eq!(
        (bad.status, bad.field()),
        (StatusCode::BAD_REQUEST, "since")
    );
    let follow = server
        .call(
            "GET",
            "/v1/services/hello/environments/dev/logs?follow=true&since=2026-11-21T13:50:40Z",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(follow.text, "", "every followed line was older");
}

#[tokio::test]
async fn an_invalid_manifest_is_422_with_its_field() {
    let server = start().await;
    server.onboard("hello").await;
    let path = "/v1/services/hello/environments/dev/deployments";
    let mut unknown = manifest("hello");
    unknown["spec"]["container_prot"] = json!(8080);
    let mut wrong_type = manifest("hello");
    wrong_type["spec"]["container_port"] = json!("eighty");
    for (manifest, field) in [
        (unknown, "manifest.spec.container_prot"),
        (wrong_type, "manifest.spec.container_port"),
        (manifest("other"), "manifest.metadata.name"),
    ] {
        let answer = server
            .call(
                "POST",
                path,
                Some(&server.admin),
                Some(json!({"manifest": manifest})),
            )
            .await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            answer.text
        );
        assert_eq!(answer.code(), "manifest_invalid");
        assert_eq!(answer.field(), field, "{}", answer.text);
    }
    let not_object = server
        .call(
            "POST",
            path,
            Some(&server.admin),
            Some(json!({"manifest": [1]})),
        )
        .await;
    assert_eq!(
        (not_object.status, not_object.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "manifest")
    );
    let reserved = server
        .call(
            "POST",
            path,
            Some(&server.admin),
            Some(json!({"manifest": manifest("hello"), "env_vars": {"PORT": "1"}})),
        )
        .await;
    assert_eq!(
        reserved.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reserved.text
    );
    assert!(
        reserved.field().starts_with("env_vars"),
        "{}",
        reserved.text
    );
    let unresolvable = server
        .call(
            "POST",
            path,
            Some(&server.admin),
            Some(json!({"manifest": manifest("hello"), "image": "registry.local/missing:1"})),
        )
        .await;
    assert_eq!(
        (unresolvable.status, unresolvable.field()),
        (StatusCode::BAD_REQUEST, "image"),
        "{}",
        unresolvable.text
    );
    let unknown_env = server
        .call(
            "POST",
            "/v1/services/hello/environments/qa/deployments",
            Some(&server.admin),
            Some(deploy_body("hello")),
        )
        .await;
    assert_eq!(unknown_env.status, StatusCode::NOT_FOUND);
    assert!(
        server
            .store
            .revision_list("hello", "dev")
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_secret_clashing_with_an_env_var_is_refused_by_name() {
    let server = start().await;
    server.onboard("hello").await;
    server
        .admin(
            "PUT",
            "/v1/services/hello/environments/dev/secrets/GREETING",
            Some(json!({"value": "s3cret"})),
            200,
        )
        .await;
    let answer = server
        .call(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(&server.admin),
            Some(deploy_body_with_secrets("hello", &["GREETING"])),
        )
        .await;
    // The manifest's own rules catch it, with the secret's place in the manifest.
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.text
    );
    assert!(answer.message().contains("GREETING"), "{}", answer.text);
    assert_eq!(answer.field(), "manifest.spec.workload.secrets[0]");

    // A manifest that does not use the secret: it stays out of the revision (and so of the
    // instances' environment), and there is nothing to clash.
    server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(deploy_body("hello")),
            202,
        )
        .await;
    let revision = &server.store.revision_list("hello", "dev").unwrap()[0];
    assert!(
        revision.secret_versions.is_empty(),
        "{:?}",
        revision.secret_versions
    );
}

#[tokio::test]
async fn secrets_are_versioned_listed_without_values_and_sealed_on_disk() {
    let server = start().await;
    server.onboard("hello").await;
    let path = "/v1/services/hello/environments/dev/secrets/DB_PASSWORD";
    let value_one = "correct-horse-battery-staple-0001";
    let value_two = "correct-horse-battery-staple-0002";
    let first = server
        .admin("PUT", path, Some(json!({"value": value_one})), 200)
        .await;
    let second = server
        .admin("PUT", path, Some(json!({"value": value_two})), 200)
        .await;
    assert_eq!(
        (first["version"].as_u64(), second["version"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(!first.to_string().contains(value_one));
    let list = server
        .call(
            "GET",
            "/v1/services/hello/environments/dev/secrets",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(
        list.body,
        json!([{"name": "DB_PASSWORD", "version": 2, "created_by": "admin", "created_at": second["created_at"], "origin": null}])
    );
    assert!(!list.text.contains("correct-horse"));

    // Deleted, then set again: the next version, sealed for that version.
    assert_eq!(
        server
            .call("DELETE", path, Some(&server.admin), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server
            .admin(
                "GET",
                "/v1/services/hello/environments/dev/secrets",
                None,
                200
            )
            .await,
        json!([])
    );
    let third = server
        .admin("PUT", path, Some(json!({"value": value_one})), 200)
        .await;
    assert_eq!(third["version"], 3);
    let bad_name = server
        .call(
            "PUT",
            "/v1/services/hello/environments/dev/secrets/db-password",
            Some(&server.admin),
            Some(json!({"value": "x"})),
        )
        .await;
    assert_eq!(
        (bad_name.status, bad_name.field()),
        (StatusCode::BAD_REQUEST, "name")
    );
    assert_eq!(
        server
            .call(
                "DELETE",
                "/v1/services/hello/environments/dev/secrets/NOPE",
                Some(&server.admin),
                None
            )
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // The deploy pins the latest version.
    server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(deploy_body_with_secrets("hello", &["DB_PASSWORD"])),
            202,
        )
        .await;
    let revisions = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/revisions",
            None,
            200,
        )
        .await;
    assert_eq!(revisions[0]["secret_versions"], json!({"DB_PASSWORD": 3}));

    // The audit log names the actor and never holds a value.
    let audit = server
        .call(
            "GET",
            "/v1/audit?after=0&limit=100",
            Some(&server.admin),
            None,
        )
        .await;
    assert!(
        audit
            .body
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "secret.set" && e["actor"] == "admin")
    );
    assert!(!audit.text.contains("correct-horse"));

    // Nothing on disk holds a value in plaintext: the database and its WAL.
    for entry in std::fs::read_dir(server.dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes
                .windows(b"correct-horse".len())
                .any(|w| w == b"correct-horse")
        );
    }
}

#[tokio::test]
async fn rollback_promote_and_decommission() {
    let server = start().await;
    server.onboard("hello").await;
    let deploy = "/v1/services/hello/environments/dev/deployments";
    let first = server
        .admin("POST", deploy, Some(deploy_body("hello")), 202)
        .await;
    // Let the first deployment finish so the second may start.
    let id = first["id"].as_i64().unwrap();
    server.finish(id);
    let second = server
        .admin("POST", deploy, Some(json!({"manifest": manifest("hello"), "env_vars": {"GREETING": "hey"}, "image": "registry.local/hello:2"})), 202)
        .await;
    assert_eq!(second["from_revision"], "hello-dev-00001");
    assert_eq!(second["to_revision"], "hello-dev-00002");
    server.finish(second["id"].as_i64().unwrap());

    // Rollback without `to`: the revision before the serving one.
    let rollback = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/rollback",
            None,
            202,
        )
        .await;
    assert_eq!(
        (rollback["kind"].as_str(), rollback["to_revision"].as_str()),
        (Some("rollback"), Some("hello-dev-00001"))
    );
    let desired = server.store.desired_get("hello", "dev").unwrap().unwrap();
    assert_eq!(desired.revisions[0].revision, "hello-dev-00001");
    let to = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/rollback",
            Some(json!({"to": "hello-dev-00002"})),
            202,
        )
        .await;
    assert_eq!(to["to_revision"], "hello-dev-00002");
    // Once it serves alone, rolling back to it again is refused as the no-op it is.
    server.finish(to["id"].as_i64().unwrap());
    let again = server
        .call(
            "POST",
            "/v1/services/hello/environments/dev/rollback",
            Some(&server.admin),
            Some(json!({"to": "hello-dev-00002"})),
        )
        .await;
    assert_eq!(
        (again.status, again.field()),
        (StatusCode::CONFLICT, "to"),
        "{}",
        again.text
    );
    assert!(
        again.text.contains("nothing to roll back"),
        "{}",
        again.text
    );
    let bad = server
        .call(
            "POST",
            "/v1/services/hello/environments/dev/rollback",
            Some(&server.admin),
            Some(json!({"to": "hello-dev-00009"})),
        )
        .await;
    assert_eq!((bad.status, bad.field()), (StatusCode::NOT_FOUND, "to"));
    let first_only = server
        .call(
            "POST",
            "/v1/services/hello/environments/staging/rollback",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(
        first_only.status,
        StatusCode::CONFLICT,
        "{}",
        first_only.text
    );

    // Promote: the revision serving in dev, copied to staging as a new revision.
    let promoted = server
        .admin(
            "POST",
            "/v1/services/hello/promote",
            Some(json!({"from": "dev", "to": "staging"})),
            202,
        )
        .await;
    assert_eq!(promoted["kind"], "promote");
    assert_eq!(promoted["to_revision"], "hello-staging-00001");
    let dev = server.store.revision_get("hello-dev-00002").unwrap();
    let staging = server.store.revision_get("hello-staging-00001").unwrap();
    assert_eq!(staging.artifact, dev.artifact);
    assert_eq!(staging.env_vars, dev.env_vars);
    assert_eq!(staging.manifest, dev.manifest);
    let backwards = server
        .call(
            "POST",
            "/v1/services/hello/promote",
            Some(&server.admin),
            Some(json!({"from": "staging", "to": "dev"})),
        )
        .await;
    assert_eq!(
        (backwards.status, backwards.field()),
        (StatusCode::BAD_REQUEST, "to")
    );

    // Decommission needs the name repeated.
    let unconfirmed = server
        .call("DELETE", "/v1/services/hello", Some(&server.admin), None)
        .await;
    assert_eq!(
        (unconfirmed.status, unconfirmed.field()),
        (StatusCode::BAD_REQUEST, "confirm")
    );
    let wrong = server
        .call(
            "DELETE",
            "/v1/services/hello?confirm=hell",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    let done = server
        .admin("DELETE", "/v1/services/hello?confirm=hello", None, 200)
        .await;
    assert_eq!(done, json!({"decommissioned": "hello"}));
    assert_eq!(
        server
            .call("GET", "/v1/services/hello", Some(&server.admin), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert!(
        server.store.desired_get("hello", "dev").is_err()
            || server.store.desired_get("hello", "dev").unwrap().is_none()
    );

    let audit = server.admin("GET", "/v1/audit", None, 200).await;
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"service.decommission")
            || actions.iter().any(|a| a.contains("decommission")),
        "{actions:?}"
    );
}

/// Moves a deployment to succeeded, as the reconciler would.
#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let server = start_with(runway_api::Limits {
        body_bytes: 1024,
        ..runway_api::Limits::default()
    })
    .await;
    server.onboard("hello").await;
    let big = json!({"value": "x".repeat(4096)});
    let answer = server
        .call(
            "PUT",
            "/v1/services/hello/environments/dev/secrets/BIG",
            Some(&server.admin),
            Some(big),
        )
        .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let garbage = server
        .raw(
            "POST",
            "/v1/services",
            Some(&server.admin),
            Some(b"{not json".to_vec()),
        )
        .await;
    assert_eq!(
        (garbage.status, garbage.code()),
        (StatusCode::BAD_REQUEST, "invalid")
    );
}

/// A manifest with `entries` variables in `spec.workload.env`: about 30 bytes each as JSON.
fn manifest_with_env(entries: usize) -> serde_json::Value {
    let mut body = deploy_body("hello");
    let env: serde_json::Map<String, serde_json::Value> = (0..entries)
        .map(|i| (format!("VARIABLE_{i:06}"), json!(format!("value-{i:06}"))))
        .collect();
    body["manifest"]["spec"]["workload"] = json!({ "env": env });
    body
}

#[tokio::test]
async fn a_manifest_over_its_limit_is_413() {
    let server = start().await;
    server.onboard("hello").await;
    let path = "/v1/services/hello/environments/dev/deployments";
    // Within the request body limit (1 MiB), over the manifest's (256 KiB).
    let big = manifest_with_env(12_000);
    let size = serde_json::to_vec(&big).unwrap().len();
    assert!(size > 256 * 1024 && size < 1 << 20, "{size}");
    let answer = server
        .call("POST", path, Some(&server.admin), Some(big))
        .await;
    assert_eq!(
        (answer.status, answer.field()),
        (StatusCode::PAYLOAD_TOO_LARGE, "manifest"),
        "{}",
        answer.text
    );
    assert!(answer.message().contains("256 KiB"), "{}", answer.text);

    // Just within the limit, it is validated (off the event loop) and deployed.
    server
        .admin("POST", path, Some(manifest_with_env(7_000)), 202)
        .await;
}

#[tokio::test]
async fn bootstrap_makes_one_admin_token() {
    let server = start().await;
    assert!(
        runway_api::bootstrap_admin(server.store.as_ref())
            .unwrap()
            .is_none()
    );
    let tokens = server.admin("GET", "/v1/tokens", None, 200).await;
    assert_eq!(tokens.as_array().unwrap().len(), 1);
    assert_eq!(tokens[0]["name"], "admin");
}

#[tokio::test]
async fn a_request_over_its_time_bound_is_503_and_every_answer_has_a_request_id() {
    let server = start_with(runway_api::Limits {
        request_timeout: std::time::Duration::from_millis(200),
        ..runway_api::Limits::default()
    })
    .await;
    server.onboard("slow").await;
    let started = std::time::Instant::now();
    let answer = server
        .call(
            "GET",
            "/v1/services/slow/environments/dev/status",
            Some(&server.admin),
            None,
        )
        .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "timeout")
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    let other = server.call("GET", "/healthz", None, None).await;
    assert!(!answer.request_id.is_empty() && !other.request_id.is_empty());
    assert_ne!(answer.request_id, other.request_id);
}

#[tokio::test]
async fn a_status_part_that_cannot_be_read_is_named_not_silently_empty() {
    let server = start().await;
    server.onboard("unreadable").await;
    let status = server
        .admin(
            "GET",
            "/v1/services/unreadable/environments/dev/status",
            None,
            200,
        )
        .await;
    assert_eq!(status["instances"], json!([]));
    assert_eq!(
        status["warnings"],
        json!(["instances: the runtime did not answer: gone"])
    );
}

/// A code snapshot's digest, as `runway deploy` names one.
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn a_process_revision_names_a_code_snapshot_uploaded_first() {
    let server = start().await;
    server.onboard("hello").await;
    server.onboard("other").await;
    let path = "/v1/services/hello/environments/dev/deployments";
    let process = json!({
        "apiVersion": "runway/v1",
        "kind": "RunwayService",
        "metadata": {"name": "hello"},
        "spec": {"container_port": 8080, "workload": {"process": {"command": ["python3", "app.py"]}}}
    });
    // No snapshot named, a name that is not a digest, one never uploaded; and a directory on
    // the server, as before snapshots, is not a field any more.
    for (body, field, says) in [
        (json!({"manifest": process}), "source", "needs `source`"),
        (
            json!({"manifest": process, "source": "sha256:../../etc"}),
            "source",
            "not a snapshot digest",
        ),
        (
            json!({"manifest": process, "source": DIGEST}),
            "source",
            "upload it first",
        ),
        (
            json!({"manifest": process, "source_dir": "/srv/hello"}),
            "source_dir",
            "unknown field",
        ),
    ] {
        let answer = server
            .call("POST", path, Some(&server.admin), Some(body))
            .await;
        assert_eq!(
            (answer.status, answer.field()),
            (StatusCode::BAD_REQUEST, field),
            "{}",
            answer.text
        );
        assert!(answer.message().contains(says), "{}", answer.text);
    }

    let snapshot = format!("/v1/services/hello/environments/dev/sources/{DIGEST}");
    server.admin("GET", &snapshot, None, 404).await;
    let bad_name = server.upload("hello", "sha256:abc", b"x").await;
    assert_eq!(
        (bad_name.status, bad_name.field()),
        (StatusCode::BAD_REQUEST, "digest")
    );
    let not_one = server.upload("hello", DIGEST, b"bad archive").await;
    assert_eq!(
        not_one.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        not_one.text
    );
    assert_eq!(not_one.body["error"]["code"], "source_invalid");
    let taken = server.upload("hello", DIGEST, b"snapshot").await;
    assert_eq!(taken.status, StatusCode::CREATED, "{}", taken.text);
    assert_eq!(taken.body["digest"], DIGEST);
    let found = server.admin("GET", &snapshot, None, 200).await;
    assert_eq!(found["service"], "hello");
    // Another service's snapshot is not this one's to run.
    let other = server
        .call(
            "POST",
            "/v1/services/other/environments/dev/deployments",
            Some(&server.admin),
            Some(json!({"manifest": {
                "apiVersion": "runway/v1",
                "kind": "RunwayService",
                "metadata": {"name": "other"},
                "spec": {"container_port": 8080, "workload": {"process": {"command": ["python3", "app.py"]}}}
            }, "source": DIGEST})),
        )
        .await;
    assert_eq!(
        (other.status, other.field()),
        (StatusCode::BAD_REQUEST, "source"),
        "{}",
        other.text
    );

    server
        .admin(
            "POST",
            path,
            Some(json!({"manifest": process, "source": DIGEST})),
            202,
        )
        .await;
    let revisions = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/revisions",
            None,
            200,
        )
        .await;
    assert_eq!(revisions[0]["source"], DIGEST);
    assert_eq!(revisions[0]["image"], json!(null));
    assert!(revisions[0].get("source_dir").is_none(), "{}", revisions[0]);
    // min_instances unset: one instance all the same.
    let desired = server.store.desired_get("hello", "dev").unwrap().unwrap();
    assert_eq!(desired.revisions[0].instances, 1);
}

#[tokio::test]
async fn a_snapshot_over_the_limit_is_413_and_is_not_kept() {
    let server = start().await;
    server.onboard("hello").await;
    let big = vec![b'x'; 2 * usize::try_from(SOURCE_LIMIT).unwrap()];
    let state_limit = server.upload("hello", DIGEST, &big).await;
    assert_eq!(
        state_limit.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        state_limit.text
    );
    assert!(server.platform.sources.lock().unwrap().is_empty());
}

#[tokio::test]
async fn plain_processes_need_the_operators_or_an_admins_leave() {
    let server = start_without_processes().await;
    server.onboard("hello").await;
    server.onboard("other").await;
    let deploy = |service: &str| format!("/v1/services/{service}/environments/dev/deployments");
    let process = |service: &str| {
        json!({"manifest": {
            "apiVersion": "runway/v1",
            "kind": "RunwayService",
            "metadata": {"name": service},
            "spec": {"container_port": 8080, "workload": {"process": {"command": ["sh", "-c", "id"]}}}
        }, "source": DIGEST})
    };
    // A deploy token for the service, as a tenant has.
    let token = server
        .admin(
            "POST",
            "/v1/tokens",
            Some(json!({"name": "ci", "scope": {"deploy": {"service": "hello", "environments": ["dev"]}}})),
            201,
        )
        .await;
    let tenant = token["token"].as_str().unwrap().to_owned();
    let refused = server
        .call(
            "POST",
            &deploy("hello"),
            Some(&tenant),
            Some(process("hello")),
        )
        .await;
    assert_eq!(
        (refused.status, refused.field()),
        (StatusCode::FORBIDDEN, "manifest.spec.workload.process"),
        "{}",
        refused.text
    );
    for says in [
        "may not run plain processes",
        "--allow-processes",
        "runtime.allow_processes",
    ] {
        assert!(refused.message().contains(says), "{}", refused.text);
    }
    assert!(
        server
            .store
            .revision_list("hello", "dev")
            .unwrap()
            .is_empty()
    );

    // Nor may it upload code it may not run.
    let upload = server
        .raw(
            "PUT",
            &format!("/v1/services/hello/environments/dev/sources/{DIGEST}"),
            Some(&tenant),
            Some(b"snapshot".to_vec()),
        )
        .await;
    assert_eq!(upload.status, StatusCode::FORBIDDEN, "{}", upload.text);

    // The tenant cannot give itself the leave; an admin can, for that service alone.
    let patch = json!({"allow_processes": true});
    let denied = server
        .call(
            "PATCH",
            "/v1/services/hello",
            Some(&tenant),
            Some(patch.clone()),
        )
        .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{}", denied.text);
    let updated = server
        .admin("PATCH", "/v1/services/hello", Some(patch), 200)
        .await;
    assert_eq!(updated["allow_processes"], true);
    let upload = server.upload("hello", DIGEST, b"snapshot").await;
    assert_eq!(upload.status, StatusCode::CREATED, "{}", upload.text);
    server
        .call(
            "POST",
            &deploy("hello"),
            Some(&tenant),
            Some(process("hello")),
        )
        .await;
    assert_eq!(server.store.revision_list("hello", "dev").unwrap().len(), 1);
    let other = server
        .call(
            "POST",
            &deploy("other"),
            Some(&server.admin),
            Some(process("other")),
        )
        .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.text);

    // Taken back: no way back to a process revision, rollback and promotion included.
    server
        .admin(
            "PATCH",
            "/v1/services/hello",
            Some(json!({"allow_processes": false})),
            200,
        )
        .await;
    let revision = server.store.revision_list("hello", "dev").unwrap()[0]
        .name
        .clone();
    let rollback = server
        .call(
            "POST",
            "/v1/services/hello/environments/dev/rollback",
            Some(&server.admin),
            Some(json!({"to": revision})),
        )
        .await;
    assert_eq!(rollback.status, StatusCode::FORBIDDEN, "{}", rollback.text);
    let promote = server
        .call(
            "POST",
            "/v1/services/hello/promote",
            Some(&server.admin),
            Some(json!({"from": "dev", "to": "staging"})),
        )
        .await;
    assert_eq!(promote.status, StatusCode::FORBIDDEN, "{}", promote.text);
    // A PATCH with an unknown field or environment is refused by name.
    let unknown = server
        .call(
            "PATCH",
            "/v1/services/hello",
            Some(&server.admin),
            Some(json!({"allow_process": true})),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.text);
    let env = server
        .call(
            "PATCH",
            "/v1/services/hello",
            Some(&server.admin),
            Some(json!({"environments": ["qa"]})),
        )
        .await;
    assert_eq!(
        (env.status, env.field()),
        (StatusCode::BAD_REQUEST, "environments")
    );
}

#[tokio::test]
async fn rollout_commands_reach_the_deployment_in_progress() {
    let server = start().await;
    server.onboard("hello").await;
    let path = "/v1/services/hello/environments/dev/rollout";
    let deploy = "/v1/services/hello/environments/dev/deployments";
    // Nothing in progress yet: 409, saying so.
    let none = server
        .admin("POST", path, Some(json!({"command": "pause"})), 409)
        .await;
    let message = |body: &serde_json::Value| body["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message(&none).contains("no deployment of hello/dev"),
        "{none}"
    );

    // A first deploy (legacy) has no steps to steer.
    let first = server
        .admin("POST", deploy, Some(deploy_body("hello")), 202)
        .await;
    let one_step = server
        .admin("POST", path, Some(json!({"command": "pause"})), 409)
        .await;
    assert!(
        message(&one_step).contains("rolls out in one step (a first deploy)"),
        "{one_step}"
    );
    server.finish(first["id"].as_i64().unwrap());
    // The autoscaler has grown the serving revision meanwhile.
    server
        .store
        .desired_set_instances("autoscaler", "hello", "dev", "hello-dev-00001", 5, None)
        .unwrap();

    // A canary deployed with `pause: true` has the pause stored at once.
    let mut manifest = manifest("hello");
    manifest["spec"]["deployment"] = json!({"strategy": "runway_canary"});
    let canary = server
        .admin(
            "POST",
            deploy,
            Some(json!({"manifest": manifest, "pause": true})),
            202,
        )
        .await;
    let id = canary["id"].as_i64().unwrap();
    let stored = server.store.deployment_get(id).unwrap();
    assert_eq!(stored.command, Some(runway_store::RolloutCommand::Pause));
    // It starts with the capacity serving now.
    let desired = server.store.desired_get("hello", "dev").unwrap().unwrap();
    assert_eq!(desired.revisions[0].revision, "hello-dev-00002");
    assert_eq!(desired.revisions[0].instances, 5);

    // A command replaces it and wakes the reconciler; an unknown one is refused by field.
    let wakes = server.platform.wakes.load(Ordering::SeqCst);
    let resumed = server
        .admin("POST", path, Some(json!({"command": "resume"})), 202)
        .await;
    assert_eq!(resumed["id"], id);
    assert_eq!(server.platform.wakes.load(Ordering::SeqCst), wakes + 1);
    let stored = server.store.deployment_get(id).unwrap();
    assert_eq!(stored.command, Some(runway_store::RolloutCommand::Resume));
    let bad = server
        .call(
            "POST",
            path,
            Some(&server.admin),
            Some(json!({"command": "stop"})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{:?}", bad.body);
    assert!(bad.field().contains("command"), "{:?}", bad.body);
    // A pending abort stands.
    server
        .admin("POST", path, Some(json!({"command": "abort"})), 202)
        .await;
    server
        .admin("POST", path, Some(json!({"command": "resume"})), 409)
        .await;
}

/// A deploy is refused, by field, when part of it would be silently ignored: a pause with
/// nothing to pause, an image beside a process, an environment the service does not have
/// (found before any image is resolved).
#[tokio::test]
async fn a_deploy_that_would_ignore_part_of_itself_is_refused() {
    let server = start().await;
    server.onboard("hello").await;
    let deploy = "/v1/services/hello/environments/dev/deployments";
    let refused = |body: serde_json::Value, field: &'static str, says: &'static str| {
        let server = &server;
        async move {
            let answer = server
                .call("POST", deploy, Some(&server.admin), Some(body))
                .await;
            assert_eq!(
                (answer.status, answer.field()),
                (StatusCode::BAD_REQUEST, field),
                "{}",
                answer.text
            );
            assert!(answer.text.contains(says), "{}", answer.text);
        }
    };
    let mut canary = manifest("hello");
    canary["spec"]["deployment"] = json!({"strategy": "runway_canary"});
    refused(
        json!({"manifest": canary, "pause": true}),
        "pause",
        "the first deploy of hello to dev",
    )
    .await;
    // A dry run first leaves its revision in the desired state with nothing: still a first
    // deploy.
    let mut dry = manifest("hello");
    dry["spec"]["deployment"] = json!({"strategy": "dryrun"});
    let dry = server
        .admin("POST", deploy, Some(json!({"manifest": dry})), 202)
        .await;
    server.finish(dry["id"].as_i64().unwrap());
    refused(
        json!({"manifest": canary, "pause": true}),
        "pause",
        "the first deploy of hello to dev",
    )
    .await;
    let first = server
        .admin("POST", deploy, Some(deploy_body("hello")), 202)
        .await;
    server.finish(first["id"].as_i64().unwrap());
    refused(
        json!({"manifest": manifest("hello"), "pause": true}),
        "pause",
        "strategy for dev is legacy",
    )
    .await;
    let process = json!({
        "apiVersion": "runway/v1",
        "kind": "RunwayService",
        "metadata": {"name": "hello"},
        "spec": {"container_port": 8080, "workload": {"process": {"command": ["python3", "app.py"]}}}
    });
    refused(
        json!({"manifest": process, "source": DIGEST, "image": "registry.example/x:1"}),
        "image",
        "runs a process",
    )
    .await;
    // Nothing was recorded by the refusals: the dry run and the first deploy only.
    let deployments = server.admin("GET", deploy, None, 200).await;
    assert_eq!(
        deployments.as_array().map(Vec::len),
        Some(2),
        "{deployments}"
    );

    server
        .admin(
            "POST",
            "/v1/services",
            Some(json!({"name": "solo", "owners": ["alice"], "environments": ["dev"]})),
            201,
        )
        .await;
    let mut missing_image = deploy_body("solo");
    missing_image["image"] = json!("registry.example/missing:1");
    let answer = server
        .call(
            "POST",
            "/v1/services/solo/environments/staging/deployments",
            Some(&server.admin),
            Some(missing_image),
        )
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
    assert!(
        answer
            .text
            .contains(r#"service \"solo\" has no environment \"staging\" (it has dev)"#),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn a_dry_run_records_its_revision_and_leaves_the_desired_state_as_it_was() {
    let server = start().await;
    server.onboard("hello").await;
    let deploy = "/v1/services/hello/environments/dev/deployments";
    let first = server
        .admin("POST", deploy, Some(deploy_body("hello")), 202)
        .await;
    server.finish(first["id"].as_i64().unwrap());
    let before = server.store.desired_get("hello", "dev").unwrap().unwrap();
    let mut manifest = manifest("hello");
    manifest["spec"]["deployment"] = json!({"strategy": "dryrun"});
    server
        .admin("POST", deploy, Some(json!({"manifest": manifest})), 202)
        .await;
    let after = server.store.desired_get("hello", "dev").unwrap().unwrap();
    assert_eq!(after.revisions[0], before.revisions[0]);
    assert_eq!(after.revisions[1].revision, "hello-dev-00002");
    assert_eq!(
        (after.revisions[1].instances, after.revisions[1].weight),
        (0, 0)
    );
}

#[tokio::test]
async fn a_full_disk_is_507_saying_what_ran_out() {
    let server = start().await;
    server.onboard("hello").await;
    server.store.limit_size(Some(1)).unwrap();
    let answer = server
        .call(
            "PUT",
            "/v1/services/hello/environments/dev/secrets/API_KEY",
            Some(&server.admin),
            Some(json!({"value": "x".repeat(60_000)})),
        )
        .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage"),
        "{}",
        answer.text
    );
    assert!(answer.message().contains("disk is full"), "{}", answer.text);
    assert!(
        answer.message().contains("nothing was written"),
        "{}",
        answer.text
    );
    server.store.limit_size(None).unwrap();
    server
        .admin(
            "PUT",
            "/v1/services/hello/environments/dev/secrets/API_KEY",
            Some(json!({"value": "x".repeat(60_000)})),
            200,
        )
        .await;
}

#[tokio::test]
async fn variables_are_set_and_unset_in_a_new_revision_of_the_serving_one() {
    let server = start().await;
    server.onboard("hello").await;
    let path = "/v1/services/hello/environments/dev/variables";
    // Nothing deployed yet: nothing to change.
    let early = server
        .call(
            "POST",
            path,
            Some(&server.admin),
            Some(json!({"set": {"MODE": "fast"}})),
        )
        .await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{}", early.text);

    let deploy = "/v1/services/hello/environments/dev/deployments";
    let mut body = deploy_body("hello");
    body["manifest"]["spec"]["workload"] = json!({"env": {"FROM_MANIFEST": "1"}});
    let first = server.admin("POST", deploy, Some(body), 202).await;
    server.finish(first["id"].as_i64().unwrap());

    let changed = server
        .admin(
            "POST",
            path,
            Some(json!({"set": {"MODE": "fast", "GREETING": "hey"}})),
            202,
        )
        .await;
    assert_eq!(
        (
            changed["from_revision"].as_str(),
            changed["to_revision"].as_str()
        ),
        (Some("hello-dev-00001"), Some("hello-dev-00002"))
    );
    let revisions = server.store.revision_list("hello", "dev").unwrap();
    let (old, new) = (&revisions[0], &revisions[1]);
    assert_eq!(new.name, "hello-dev-00002");
    assert_eq!(
        new.env_vars,
        [
            ("GREETING".to_owned(), "hey".to_owned()),
            ("MODE".to_owned(), "fast".to_owned())
        ]
        .into(),
    );
    assert_eq!(
        new.set_vars,
        ["GREETING".to_owned(), "MODE".to_owned()].into()
    );
    assert_eq!(
        (&new.manifest, &new.artifact),
        (&old.manifest, &old.artifact)
    );
    server.finish(changed["id"].as_i64().unwrap());

    // A deploy from the repository keeps them over its own values, and says what changed.
    let mut body = deploy_body("hello");
    body["manifest"]["spec"]["workload"] = json!({"env": {"FROM_MANIFEST": "1"}});
    body["env_vars"] = json!({"GREETING": "hi", "FROM_FILE": "1"});
    let deployed = server.admin("POST", deploy, Some(body), 202).await;
    assert_eq!(
        deployed["variables"],
        json!({"kept": ["GREETING", "MODE"], "added": ["FROM_FILE"]})
    );
    server.finish(deployed["id"].as_i64().unwrap());
    let revision = server.store.revision_get("hello-dev-00003").unwrap();
    assert_eq!(revision.env_vars["GREETING"], "hey");
    assert_eq!(revision.env_vars["FROM_FILE"], "1");
    assert_eq!(
        revision.set_vars,
        ["GREETING".to_owned(), "MODE".to_owned()].into()
    );
    let view = server
        .admin(
            "GET",
            "/v1/services/hello/environments/dev/revisions",
            None,
            200,
        )
        .await;
    assert!(
        view.as_array()
            .unwrap()
            .iter()
            .any(|r| r["set_variables"] == json!(["GREETING", "MODE"])),
        "{view:#}"
    );
    // Unset: gone, and no longer kept by the next deploy.
    let unset = server
        .admin("POST", path, Some(json!({"unset": ["MODE"]})), 202)
        .await;
    server.finish(unset["id"].as_i64().unwrap());
    let revision = server.store.revision_get("hello-dev-00004").unwrap();
    assert!(!revision.env_vars.contains_key("MODE"));
    assert_eq!(revision.set_vars, ["GREETING".to_owned()].into());

    // What cannot be unset, and nothing at all, are refused with their field.
    for (body, field, says) in [
        (
            json!({"unset": ["FROM_MANIFEST"]}),
            "unset",
            "spec.workload.env",
        ),
        (json!({"unset": ["NEVER_SET"]}), "unset", "not set"),
        (
            json!({"unset": ["FROM_FILE"]}),
            "unset",
            "comes from the repository",
        ),
        (json!({}), "set", "nothing"),
        (json!({"set": {"A": "1"}, "unset": ["A"]}), "unset", "both"),
    ] {
        let refused = server
            .call("POST", path, Some(&server.admin), Some(body))
            .await;
        assert_eq!(
            (refused.status, refused.field()),
            (StatusCode::BAD_REQUEST, field),
            "{}",
            refused.text
        );
        assert!(refused.text.contains(says), "{}", refused.text);
    }
}

#[tokio::test]
async fn an_environment_is_added_to_a_service_keeping_its_history() {
    let server = start().await;
    server
        .admin(
            "POST",
            "/v1/services",
            Some(json!({"name": "hello", "owners": ["alice"], "environments": ["dev"]})),
            201,
        )
        .await;
    let deploy = "/v1/services/hello/environments/dev/deployments";
    let first = server
        .admin("POST", deploy, Some(deploy_body("hello")), 202)
        .await;
    server.finish(first["id"].as_i64().unwrap());

    let updated = server
        .admin(
            "PATCH",
            "/v1/services/hello",
            Some(json!({"add_environments": ["staging", "dev"]})),
            200,
        )
        .await;
    assert_eq!(updated["environments"], json!(["dev", "staging"]));
    assert_eq!(server.store.revision_list("hello", "dev").unwrap().len(), 1);
    assert!(server.store.desired_get("hello", "dev").unwrap().is_some());

    for body in [
        json!({"add_environments": ["qa"]}),
        json!({"add_environments": ["staging"], "environments": ["dev"]}),
    ] {
        let refused = server
            .call(
                "PATCH",
                "/v1/services/hello",
                Some(&server.admin),
                Some(body),
            )
            .await;
        assert_eq!(
            (refused.status, refused.field()),
            (StatusCode::BAD_REQUEST, "add_environments"),
            "{}",
            refused.text
        );
    }
}

/// A client that sends a large body the server answers without reading (an upload with no
/// token) still reads that answer: the server closes lingering, reading and dropping the rest,
/// rather than resetting the connection under the client's feet.
#[tokio::test]
async fn an_answer_before_the_body_is_read_reaches_the_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = start().await;
    let body = vec![b'x'; 8 << 20];
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "PUT /v1/services/hello/environments/dev/sources/sha256:{} HTTP/1.1\r\nhost: localhost\r\n\
         content-type: application/x-tar\r\ncontent-length: {}\r\n\r\n",
        "0".repeat(64),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let sent = stream.write_all(&body).await;
    assert!(sent.is_ok(), "the body could not be sent: {sent:?}");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await
    .unwrap();
    assert!(read.is_ok(), "the answer was lost: {read:?}");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}
