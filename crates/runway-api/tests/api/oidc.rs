//! Identity tokens from CI (OIDC) as bearer tokens, against a real issuer on loopback: its
//! discovery document and key set served over HTTPS with a certificate from a test authority,
//! ES256 and RS256 keys, a key rotated mid-test; every refusal the issue names; and the
//! bindings' scope (service, environments, narrowed by an `environment` claim).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::KeyPair as _;
use runway_api::oidc::{Binding, IssuerConfig, OidcConfig, Verifier};
use serde_json::{Value, json};

use crate::support::{Server, start_with_oidc};

const AUDIENCE: &str = "https://runway.test";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key and its JWK.
pub(crate) struct SigningKey {
    kid: String,
    algorithm: Algorithm,
    encoding: EncodingKey,
    pub(crate) jwk: Value,
}

pub(crate) fn es256(kid: &str) -> SigningKey {
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref();
    SigningKey {
        kid: kid.to_owned(),
        algorithm: Algorithm::ES256,
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
    }
}

/// The RSA key of a fixture (PKCS#1), for RS256.
fn rs256(kid: &str) -> SigningKey {
    let pem = include_str!("../../../runway-ingress/tests/fixtures/pkcs1-ca/ca-key.pem");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    let pair = ring::rsa::KeyPair::from_der(&der).unwrap();
    let public: ring::rsa::PublicKeyComponents<Vec<u8>> = pair.public().into();
    SigningKey {
        kid: kid.to_owned(),
        algorithm: Algorithm::RS256,
        encoding: EncodingKey::from_rsa_der(&der),
        jwk: json!({"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
            "n": b64(&public.n), "e": b64(&public.e)}),
    }
}

impl SigningKey {
    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

/// The issuer: HTTPS on loopback serving its discovery document and the JWKs in `keys`
/// (changed by the test to rotate), and how many times the key set was fetched.
struct Issuer {
    url: String,
    ca: tempfile::TempDir,
    keys: Arc<Mutex<Vec<Value>>>,
    fetched: Arc<std::sync::atomic::AtomicUsize>,
}

async fn issuer() -> Issuer {
    let ca = tempfile::tempdir().unwrap();
    let authority = runway_ingress::LocalCa::load_or_create(ca.path()).unwrap();
    let (chain, key) = authority.issue(&["127.0.0.1".to_owned()]).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let keys: Arc<Mutex<Vec<Value>>> = Arc::default();
    let fetched = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = {
        let (url, keys, fetched) = (url.clone(), Arc::clone(&keys), Arc::clone(&fetched));
        axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(move || {
                    let url = url.clone();
                    async move {
                        axum::Json(json!({"issuer": url, "jwks_uri": format!("{url}/oauth/discovery/keys")}))
                    }
                }),
            )
            .route(
                "/oauth/discovery/keys",
                axum::routing::get(move || {
                    let (keys, fetched) = (Arc::clone(&keys), Arc::clone(&fetched));
                    async move {
                        fetched.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let keys = keys.lock().unwrap().clone();
                        axum::Json(json!({ "keys": keys }))
                    }
                }),
            )
    };
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Issuer {
        url,
        ca,
        keys,
        fetched,
    }
}

pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// GitLab CI's `id_tokens` claims for a job of `group/app` on protected `main`.
fn claims(issuer: &str) -> Value {
    json!({
        "iss": issuer, "aud": AUDIENCE, "iat": now(), "nbf": now(), "exp": now() + 300,
        "sub": "project_path:group/app:ref_type:branch:ref:main",
        "project_path": "group/app", "ref": "main", "ref_type": "branch",
        "ref_protected": "true", "pipeline_id": "4242", "pipeline_source": "push",
    })
}

fn verifier(issuer: &Issuer) -> Verifier {
    verifier_with(
        issuer,
        Binding {
            claims: [
                ("project_path".to_owned(), "group/app".to_owned()),
                ("ref_protected".to_owned(), "true".to_owned()),
            ]
            .into(),
            // It sets secrets, which a maintainer does.
            role: runway_api::oidc::Role::Maintainer,
            service: "app".to_owned(),
            environments: vec!["staging".to_owned(), "production".to_owned()],
        },
    )
}

/// A verifier trusting `issuer`, with `binding` alone.
fn verifier_with(issuer: &Issuer, binding: Binding) -> Verifier {
    Verifier::new(&OidcConfig {
        issuers: vec![IssuerConfig {
            issuer: issuer.url.clone(),
            audience: AUDIENCE.to_owned(),
            jwks_url: None,
            ca_file: Some(issuer.ca.path().join("ca.pem")),
            bindings: vec![binding],
        }],
    })
    .unwrap()
    .refresh_at_most_every(Duration::from_millis(200))
}

/// The status of setting a secret of `app` in `env` with `token`.
async fn set_secret(server: &Server, token: &str, env: &str) -> u16 {
    server
        .call(
            "PUT",
            &format!("/v1/services/app/environments/{env}/secrets/API_KEY"),
            Some(token),
            Some(json!({"value": "s3cr3t"})),
        )
        .await
        .status
        .as_u16()
}

/// A binding's role is what its tokens have: a deployer deploys, and sets no secret.
#[tokio::test]
async fn a_bindings_role_is_its_tokens_role() {
    let issuer = issuer().await;
    let key = es256("es-1");
    *issuer.keys.lock().unwrap() = vec![key.jwk.clone()];
    let deployer = verifier_with(
        &issuer,
        Binding {
            claims: [("project_path".to_owned(), "group/app".to_owned())].into(),
            role: runway_api::oidc::Role::Deployer,
            service: "app".to_owned(),
            environments: vec!["staging".to_owned()],
        },
    );
    let server = start_with_oidc(deployer).await;
    server.onboard("app").await;
    let token = key.sign(&claims(&issuer.url));
    let refused = server
        .call(
            "PUT",
            "/v1/services/app/environments/staging/secrets/API_KEY",
            Some(&token),
            Some(json!({"value": "s3cr3t"})),
        )
        .await;
    assert_eq!(refused.status.as_u16(), 403, "{}", refused.text);
    assert!(
        refused.message().contains("`maintainer`"),
        "{}",
        refused.text
    );
    let deployed = server
        .call(
            "POST",
            "/v1/services/app/environments/staging/deployments",
            Some(&token),
            Some(crate::support::deploy_body("app")),
        )
        .await;
    assert_eq!(deployed.status.as_u16(), 202, "{}", deployed.text);
    // `deploy`, the name earlier versions had, is the same role.
    let old: Binding = serde_json::from_value(json!({
        "claims": {"project_path": "group/app"}, "role": "deploy", "service": "app",
        "environments": ["staging"],
    }))
    .unwrap();
    assert_eq!(old.role, runway_api::oidc::Role::Deployer);
    let reader: Binding =
        serde_json::from_value(json!({"claims": {"a": "b"}, "role": "reader"})).unwrap();
    assert_eq!(reader.role, runway_api::oidc::Role::Viewer);
}

#[tokio::test]
async fn a_ci_jobs_identity_token_acts_within_its_binding() {
    let issuer = issuer().await;
    let (es, rs) = (es256("es-1"), rs256("rs-1"));
    *issuer.keys.lock().unwrap() = vec![es.jwk.clone(), rs.jwk.clone()];
    let server = start_with_oidc(verifier(&issuer)).await;
    server.onboard("app").await;
    server.onboard("other").await;

    for key in [&es, &rs] {
        let token = key.sign(&claims(&issuer.url));
        let whoami = server.call("GET", "/v1/whoami", Some(&token), None).await;
        assert_eq!(whoami.status.as_u16(), 200, "{}", whoami.text);
        assert_eq!(
            whoami.body["name"],
            format!(
                "oidc:{} project_path:group/app:ref_type:branch:ref:main pipeline 4242",
                issuer.url
            )
        );
        assert_eq!(whoami.body["token_id"], 0);
        assert_eq!(set_secret(&server, &token, "staging").await, 200);
        assert_eq!(set_secret(&server, &token, "dev").await, 403);
    }
    // Bound to `app` alone.
    let token = es.sign(&claims(&issuer.url));
    let other = server
        .call(
            "GET",
            "/v1/services/other/environments/staging/revisions",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(other.status.as_u16(), 403, "{}", other.text);
    // A job's `environment` narrows its binding.
    let mut staging_job = claims(&issuer.url);
    staging_job["environment"] = json!("staging");
    let token = es.sign(&staging_job);
    assert_eq!(set_secret(&server, &token, "staging").await, 200);
    assert_eq!(set_secret(&server, &token, "production").await, 403);
    // The audit log names the identity.
    let audit = server.admin("GET", "/v1/audit?limit=50", None, 200).await;
    assert!(
        audit.to_string().contains("oidc:https://127.0.0.1"),
        "{audit}"
    );
}

/// A merge request's review job (`environment: review/…`) is narrowed to the service's
/// previews; one from a fork (GitLab names the fork in `project_path` and the project it runs
/// in in `job_project_path`) is marked, so its previews get no secrets.
#[tokio::test]
async fn a_review_job_acts_on_previews_and_a_forks_is_marked() {
    let issuer = issuer().await;
    let key = es256("es-1");
    *issuer.keys.lock().unwrap() = vec![key.jwk.clone()];
    let verifier = verifier_with(
        &issuer,
        Binding {
            claims: [("job_project_path".to_owned(), "group/app".to_owned())].into(),
            role: runway_api::oidc::Role::Deployer,
            service: "app".to_owned(),
            environments: vec!["staging".to_owned(), "preview".to_owned()],
        },
    );
    let mut review = claims(&issuer.url);
    review["job_project_path"] = json!("group/app");
    review["environment"] = json!("review/app/mr-4");
    let identity = verifier.verify(&key.sign(&review)).await.unwrap();
    assert_eq!(identity.environments, Some(vec!["preview".to_owned()]));
    assert!(!identity.fork);
    review["project_path"] = json!("fork/app");
    let identity = verifier.verify(&key.sign(&review)).await.unwrap();
    assert!(identity.fork);
    // Without the claim (an older GitLab), nothing says it is a fork's, and nothing binds it.
    let mut older = claims(&issuer.url);
    older["environment"] = json!("staging");
    assert!(verifier.verify(&key.sign(&older)).await.is_err());
}

#[tokio::test]
async fn every_bad_token_is_refused() {
    let issuer = issuer().await;
    let key = es256("es-1");
    *issuer.keys.lock().unwrap() = vec![key.jwk.clone()];
    let server = start_with_oidc(verifier(&issuer)).await;
    server.onboard("app").await;
    let status = |token: String| {
        let server = &server;
        async move { set_secret(server, &token, "staging").await }
    };
    let with = |change: &dyn Fn(&mut Value)| {
        let mut claims = claims(&issuer.url);
        change(&mut claims);
        key.sign(&claims)
    };
    // Expired, beyond the minute of skew; not valid yet.
    assert_eq!(status(with(&|c| c["exp"] = json!(now() - 120))).await, 401);
    assert_eq!(status(with(&|c| c["nbf"] = json!(now() + 600))).await, 401);
    // Within the skew: accepted.
    assert_eq!(status(with(&|c| c["exp"] = json!(now() - 10))).await, 200);
    // Issued an hour ahead of the server's clock (`iat`), or valid only from then (`nbf`,
    // here as a fraction, which jsonwebtoken reads too); and a `nbf` that is no time at all.
    let future_iat = with(&|c| c["iat"] = json!(now() + 3600));
    assert_eq!(status(future_iat.clone()).await, 401);
    let future_nbf = with(&|c| c["nbf"] = json!(now() as f64 + 3600.5));
    assert_eq!(status(future_nbf.clone()).await, 401);
    let text_nbf = with(&|c| c["nbf"] = json!((now() + 3600).to_string()));
    assert_eq!(status(text_nbf.clone()).await, 401);
    // Why, as the server logs it: the claim named.
    let verifier = verifier(&issuer);
    for (token, why) in [
        (&future_iat, "issued in the future: `iat` is 3"),
        (&future_nbf, "not valid yet (`nbf`"),
        (&text_nbf, "its `nbf` claim is not a time"),
    ] {
        let refusal = verifier.verify(token).await.unwrap_err().to_string();
        assert!(refusal.contains(why), "{refusal}");
    }
    // Within the skew, either way: accepted.
    assert_eq!(status(with(&|c| c["iat"] = json!(now() + 30))).await, 200);
    assert_eq!(status(with(&|c| c["nbf"] = json!(now() + 30))).await, 200);
    // Another audience; another issuer.
    assert_eq!(
        status(with(&|c| c["aud"] = json!("https://elsewhere.test"))).await,
        401
    );
    assert_eq!(
        status(with(&|c| c["iss"] = json!("https://evil.test"))).await,
        401
    );
    // A signature that does not match: the payload changed after signing.
    let token = key.sign(&claims(&issuer.url));
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let mut forged = claims(&issuer.url);
    forged["project_path"] = json!("group/app");
    forged["ref_protected"] = json!("true");
    forged["sub"] = json!("someone else");
    parts[1] = b64(forged.to_string().as_bytes());
    assert_eq!(status(parts.join(".")).await, 401);
    // A key the issuer does not publish; a symmetric algorithm.
    assert_eq!(
        status(es256("unknown").sign(&claims(&issuer.url))).await,
        401
    );
    let hs = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(&issuer.url),
        &EncodingKey::from_secret(b"guess"),
    )
    .unwrap();
    assert_eq!(status(hs).await, 401);
    // Good, but bound to nothing: an unprotected ref, a fork's project.
    assert_eq!(
        status(with(&|c| c["ref_protected"] = json!("false"))).await,
        403
    );
    assert_eq!(
        status(with(&|c| c["project_path"] = json!("fork/app"))).await,
        403
    );
}

#[tokio::test]
async fn a_rotated_key_is_fetched_and_the_old_one_stops_working() {
    let issuer = issuer().await;
    let (old, new) = (es256("2025"), es256("2026"));
    *issuer.keys.lock().unwrap() = vec![old.jwk.clone()];
    let server = start_with_oidc(verifier(&issuer)).await;
    server.onboard("app").await;
    assert_eq!(
        set_secret(&server, &old.sign(&claims(&issuer.url)), "staging").await,
        200
    );
    assert_eq!(
        set_secret(&server, &old.sign(&claims(&issuer.url)), "staging").await,
        200
    );
    assert_eq!(
        issuer.fetched.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "keys not cached"
    );

    // The issuer rotates: only the new key is published.
    *issuer.keys.lock().unwrap() = vec![new.jwk.clone()];
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        set_secret(&server, &new.sign(&claims(&issuer.url)), "staging").await,
        200
    );
    assert_eq!(issuer.fetched.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Tokens of the old key still in the cache's set? No: the set was replaced.
    assert_eq!(
        set_secret(&server, &old.sign(&claims(&issuer.url)), "staging").await,
        401
    );
}
