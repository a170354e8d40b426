//! Custom domains, their certificates, ACME accounts, and console sessions (tokens made from
//! another).

use runway_store::{
    DomainState, IssuedCertificate, NewToken, ServiceUpdate, Store, StoreError, Timestamp,
    TokenScope,
};

use crate::support::{fixture, onboard};

fn issued(generation: u32, not_after: Timestamp) -> IssuedCertificate {
    IssuedCertificate {
        cert_pem: format!("-----BEGIN CERTIFICATE-----\n{generation}\n"),
        not_after,
        generation,
        nonce: vec![generation as u8; 12],
        ciphertext: vec![9; 40],
        renew_at: not_after.add_millis(-1_000),
    }
}

#[test]
fn a_domain_is_added_issued_failed_and_removed_with_its_audit() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    onboard(store, "api");

    let added = store
        .domain_add("alice", "www.example.com", "hello", "production")
        .unwrap();
    assert_eq!(added.state, DomainState::Pending);
    assert_eq!((added.generation, added.attempts), (0, 0));
    assert!(added.next_attempt_at.is_some());
    assert!(added.cert_pem.is_none());

    // One name, one service: another tenant cannot take it, nor the same one twice.
    let taken = store
        .domain_add("bob", "www.example.com", "api", "production")
        .unwrap_err();
    assert!(
        matches!(&taken, StoreError::AlreadyExists { kind: "domain", name } if name.contains("hello")),
        "{taken:?}"
    );
    assert!(matches!(
        store.domain_add("alice", "a.example.com", "nope", "production"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.domain_add("alice", "a.example.com", "hello", "qa"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.domain_add("alice", "A.example.com", "hello", "production"),
        Err(StoreError::Invalid(_))
    ));
    // No certificate yet: nothing for the data plane.
    assert!(store.domain_certificates().unwrap().is_empty());

    let failed = store
        .domain_failed(
            "acme",
            "www.example.com",
            "urn:ietf:params:acme:error:connection: refused",
            Timestamp::now().add_millis(60_000),
        )
        .unwrap();
    assert_eq!(failed.state, DomainState::Failed);
    assert_eq!(failed.attempts, 1);
    assert!(failed.detail.unwrap().contains("refused"));

    let expiry = Timestamp::now().add_millis(86_400_000);
    let ok = store
        .domain_issued("acme", "www.example.com", &issued(1, expiry))
        .unwrap();
    assert_eq!(ok.state, DomainState::Issued);
    assert_eq!((ok.generation, ok.attempts, ok.detail), (1, 0, None));
    assert_eq!(ok.not_after, Some(expiry));
    // A key sealed for a generation that is not the next one is refused: it would not open.
    assert!(matches!(
        store.domain_issued("acme", "www.example.com", &issued(1, expiry)),
        Err(StoreError::Conflict(_))
    ));
    let certificates = store.domain_certificates().unwrap();
    assert_eq!(certificates.len(), 1);
    assert_eq!(certificates[0].generation, 1);
    assert_eq!(certificates[0].ciphertext, vec![9; 40]);

    // A failed renewal keeps the certificate it had.
    let renewal = store
        .domain_failed(
            "acme",
            "www.example.com",
            "timeout",
            Timestamp::now().add_millis(1),
        )
        .unwrap();
    assert_eq!(renewal.state, DomainState::Failed);
    assert!(renewal.cert_pem.is_some());
    assert_eq!(store.domain_certificates().unwrap().len(), 1);

    // The environment cannot go while a domain points at it.
    let refused = store
        .service_update(
            "alice",
            "hello",
            &ServiceUpdate {
                environments: Some(vec!["staging".into()]),
                ..ServiceUpdate::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::Conflict(m) if m.contains("www.example.com")),
        "{refused:?}"
    );

    store.domain_remove("alice", "www.example.com").unwrap();
    assert!(matches!(
        store.domain_remove("alice", "www.example.com"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.domain_failed("acme", "www.example.com", "x", Timestamp::now()),
        Err(StoreError::NotFound { .. })
    ));
    let actions: Vec<String> = store
        .audit_list(0, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .filter(|a| a.starts_with("domain."))
        .collect();
    assert_eq!(
        actions,
        [
            "domain.add",
            "domain.failed",
            "domain.issued",
            "domain.failed",
            "domain.remove"
        ]
    );
    f.check_integrity();
}

#[test]
fn a_decommissioned_service_takes_its_domains_with_it() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    store
        .domain_add("alice", "hello.example.com", "hello", "staging")
        .unwrap();
    store
        .domain_issued(
            "acme",
            "hello.example.com",
            &issued(1, Timestamp::now().add_millis(10_000)),
        )
        .unwrap();
    store.service_decommission("alice", "hello").unwrap();
    assert!(store.domain_list().unwrap().is_empty());
    assert!(store.domain_certificates().unwrap().is_empty());
    // The name is free for whoever onboards next, with no certificate of the old one's.
    onboard(store, "other");
    let again = store
        .domain_add("bob", "hello.example.com", "other", "staging")
        .unwrap();
    assert_eq!(again.generation, 0);
    let audit = store.audit_list(0, 100).unwrap();
    let decommission = audit
        .iter()
        .find(|e| e.action == "service.decommission")
        .unwrap();
    assert_eq!(decommission.detail["domains_removed"], 1);
    f.check_integrity();
}

#[test]
fn an_acme_account_is_kept_once_per_directory() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    let directory = "https://acme.example/directory";
    assert_eq!(store.acme_account_get(directory).unwrap(), None);
    let first = store
        .acme_account_put("acme", directory, &[1; 12], &[2; 30])
        .unwrap();
    assert_eq!(first, (vec![1; 12], vec![2; 30]));
    // A second writer racing gets the first one's account, not its own.
    let second = store
        .acme_account_put("acme", directory, &[3; 12], &[4; 30])
        .unwrap();
    assert_eq!(second, first);
    assert_eq!(store.acme_account_get(directory).unwrap(), Some(first));
    assert_eq!(store.acme_account_get("https://other/").unwrap(), None);
}

#[test]
fn revoking_a_token_ends_the_sessions_made_from_it() {
    let f = fixture();
    let store: &dyn Store = &*f.store;
    onboard(store, "hello");
    let scope = TokenScope::Deploy {
        service: "hello".into(),
        environments: vec!["staging".into()],
    };
    let parent = store
        .token_create(
            "root",
            &NewToken {
                name: "ci".into(),
                hash: vec![1; 32],
                scope: scope.clone(),
                expires_at: None,
                parent: None,
            },
        )
        .unwrap();
    let session = |hash: u8| NewToken {
        name: "console: ci".into(),
        hash: vec![hash; 32],
        scope: scope.clone(),
        expires_at: Some(Timestamp::now().add_millis(3_600_000)),
        parent: Some(parent.id),
    };
    let one = store.token_create("ci", &session(2)).unwrap();
    let two = store.token_create("ci", &session(3)).unwrap();
    assert_eq!(one.parent, Some(parent.id));
    // Ending one session leaves its parent and the other alone.
    store.token_revoke("ci", one.id).unwrap();
    assert!(
        store
            .token_by_hash(&[1; 32])
            .unwrap()
            .unwrap()
            .revoked_at
            .is_none()
    );
    assert!(
        store
            .token_by_hash(&[3; 32])
            .unwrap()
            .unwrap()
            .revoked_at
            .is_none()
    );
    // Revoking the parent ends every session made from it.
    store.token_revoke("root", parent.id).unwrap();
    assert!(
        store
            .token_by_hash(&[3; 32])
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some()
    );
    let revoke = store
        .audit_list(0, 100)
        .unwrap()
        .into_iter()
        .rfind(|e| e.action == "token.revoke")
        .unwrap();
    assert_eq!(revoke.detail["sessions_revoked"], 1);
    // No session is made from a revoked token.
    assert!(matches!(
        store.token_create("ci", &session(4)),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(two.parent, Some(parent.id));
    f.check_integrity();
}
