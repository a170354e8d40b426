//! Secret versions chosen in the store's transaction, and promotion pinning the target
//! environment's secrets.

use hyper::StatusCode;
use runway_secrets::{Context, Sealed, Sealer};
use runway_store::{NewRevision, PlannedRevision, RevisionRef, Store};
use serde_json::json;

use crate::support::{Server, deploy_body_with_secrets, manifest, replica_of, start};

/// Opens version `version` of a secret of `hello` with the server's key and its own context.
pub(crate) fn open(server: &Server, env: &str, name: &str, version: u32) -> String {
    let stored = server
        .store
        .secret_read("hello", env, name, version)
        .unwrap();
    let sealed = Sealed {
        nonce: stored.nonce,
        ciphertext: stored.ciphertext,
    };
    let context = Context {
        service: "hello",
        env,
        name,
        version: u64::from(version),
    };
    let value = Sealer::new(&server.key).open(&sealed, &context).unwrap();
    String::from_utf8(value.expose().to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sets_of_one_secret_on_two_replicas_get_consecutive_versions() {
    let one = start().await;
    one.onboard("hello").await;
    // Another API process over the same database: no lock in memory can cover both.
    let two = replica_of(&one).await;
    let path = "/v1/services/hello/environments/dev/secrets/API_KEY";
    let mut next = 1;
    for round in 0..25 {
        let (a_value, b_value) = (format!("value-a-{round}"), format!("value-b-{round}"));
        let (a, b) = tokio::join!(
            one.call(
                "PUT",
                path,
                Some(&one.admin),
                Some(json!({"value": a_value}))
            ),
            two.call(
                "PUT",
                path,
                Some(&two.admin),
                Some(json!({"value": b_value}))
            ),
        );
        assert_eq!(a.status, StatusCode::OK, "round {round}: {}", a.text);
        assert_eq!(b.status, StatusCode::OK, "round {round}: {}", b.text);
        let version = |body: &serde_json::Value| u32::try_from(body["version"].as_u64().unwrap());
        let (a_version, b_version) = (version(&a.body).unwrap(), version(&b.body).unwrap());
        let mut both = [a_version, b_version];
        both.sort_unstable();
        assert_eq!(both, [next, next + 1], "round {round}");
        // Each value opens with the context of the version it was stored as.
        assert_eq!(open(&one, "dev", "API_KEY", a_version), a_value);
        assert_eq!(open(&one, "dev", "API_KEY", b_version), b_value);
        next += 2;
    }
}

#[tokio::test]
async fn promotion_pins_the_target_environments_secrets_and_needs_them_all() {
    let server = start().await;
    server.onboard("hello").await;
    let secret = |env: &str| format!("/v1/services/hello/environments/{env}/secrets/DB_PASSWORD");
    for value in ["dev-one", "dev-two", "dev-three"] {
        server
            .admin("PUT", &secret("dev"), Some(json!({"value": value})), 200)
            .await;
    }
    let deployed = server
        .admin(
            "POST",
            "/v1/services/hello/environments/dev/deployments",
            Some(deploy_body_with_secrets("hello", &["DB_PASSWORD"])),
            202,
        )
        .await;
    server.finish(deployed["id"].as_i64().unwrap());
    let dev = server.store.revision_get("hello-dev-00001").unwrap();
    assert_eq!(dev.secret_versions["DB_PASSWORD"], 3);

    // Staging has no DB_PASSWORD: refused, naming the secret and the environment.
    let promote = json!({"from": "dev", "to": "staging"});
    let refused = server
        .call(
            "POST",
            "/v1/services/hello/promote",
            Some(&server.admin),
            Some(promote.clone()),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert!(
        refused.message().contains("DB_PASSWORD"),
        "{}",
        refused.text
    );
    assert!(refused.message().contains("staging"), "{}", refused.text);
    assert!(
        server
            .store
            .revision_list("hello", "staging")
            .unwrap()
            .is_empty()
    );

    // Set there (once: version 1), the promotion pins staging's version, which opens there.
    server
        .admin(
            "PUT",
            &secret("staging"),
            Some(json!({"value": "staging-one"})),
            200,
        )
        .await;
    server
        .admin("POST", "/v1/services/hello/promote", Some(promote), 202)
        .await;
    let staging = server.store.revision_get("hello-staging-00001").unwrap();
    assert_eq!(
        staging.secret_versions,
        [("DB_PASSWORD".to_owned(), 1)].into()
    );
    assert_eq!(open(&server, "staging", "DB_PASSWORD", 1), "staging-one");
}

#[tokio::test]
async fn promotion_refuses_a_secret_clashing_with_an_env_var() {
    let server = start().await;
    server.onboard("hello").await;
    for env in ["dev", "staging"] {
        server
            .admin(
                "PUT",
                &format!("/v1/services/hello/environments/{env}/secrets/GREETING"),
                Some(json!({"value": "s3cret"})),
                200,
            )
            .await;
    }
    // A revision from before the check at deploy: GREETING both a secret and a variable.
    let record = server
        .store
        .record_deploy(
            "admin",
            &NewRevision {
                service: "hello".into(),
                env: "dev".into(),
                manifest: manifest("hello"),
                artifact: json!({"image": "registry.local/hello@sha256:ab"}),
                env_vars: [("GREETING".to_owned(), "hi".to_owned())].into(),
                set_vars: Default::default(),
                secret_versions: [("GREETING".to_owned(), 1)].into(),
            },
            &[PlannedRevision {
                revision: RevisionRef::New,
                instances: 1,
                weight: 100,
            }],
        )
        .unwrap();
    server.finish(record.deployment.id);
    let refused = server
        .call(
            "POST",
            "/v1/services/hello/promote",
            Some(&server.admin),
            Some(json!({"from": "dev", "to": "staging"})),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert!(refused.message().contains("GREETING"), "{}", refused.text);
    assert!(
        server
            .store
            .revision_list("hello", "staging")
            .unwrap()
            .is_empty()
    );
}
