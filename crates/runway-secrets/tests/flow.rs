//! The crate's public API end to end, as the control plane will use it.

#![allow(clippy::unwrap_used, reason = "tests")]

use runway_secrets::{
    Action, Context, Denied, Env, Grant, MasterKey, Need, Role, Scope, Sealer, SecretValue, Target,
    Token, TokenKind, authorize, check_clashes, validate_name,
};

#[test]
fn a_secret_is_set_stored_and_read_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("master.key");

    // First start: the key is created; a secret is validated, checked and sealed.
    let (key, created) = MasterKey::load_or_create(&key_path).unwrap();
    assert!(created);
    validate_name("DB_PASSWORD").unwrap();
    check_clashes(["DB_PASSWORD"], ["LOG_LEVEL", "DB_HOST"]).unwrap();
    let context = Context {
        service: "billing",
        env: "production",
        name: "DB_PASSWORD",
        version: 1,
    };
    let stored = Sealer::new(&key)
        .seal(&SecretValue::from("hunter2".to_owned()), &context)
        .unwrap();
    drop(key);

    // Second start: the same key is loaded and the row opens.
    let (key, created) = MasterKey::load_or_create(&key_path).unwrap();
    assert!(!created);
    let value = Sealer::new(&key).open(&stored, &context).unwrap();
    assert_eq!(value.expose(), b"hunter2");
    assert_eq!(format!("{value:?} {value}"), "<redacted> <redacted>");
}

#[test]
fn a_deploy_token_is_issued_presented_and_checked() {
    let (plaintext, stored_hash) = Token::generate(TokenKind::Deploy).unwrap();
    let scope = Scope::Grants {
        grants: vec![Grant {
            role: Role::Deployer,
            on: Target::Service("billing".to_owned()),
            environments: Some(vec!["staging".to_owned()]),
        }],
        expires_at: Some(2_000),
    };

    // A request arrives with the token's text.
    let token = Token::parse(plaintext.expose()).unwrap();
    assert_eq!(token.kind(), TokenKind::Deploy);
    assert_eq!(*token.hash(), stored_hash);

    let deploy = Action {
        service: Some("billing"),
        team: None,
        env: Env::One("staging"),
        need: Need::Role(Role::Deployer),
    };
    assert_eq!(authorize(&scope, &deploy, 1_000, false), Ok(()));
    assert_eq!(
        authorize(&scope, &deploy, 2_000, false),
        Err(Denied::Expired)
    );
    assert_eq!(
        authorize(&scope, &deploy, 1_000, true),
        Err(Denied::Revoked)
    );
    let create_token = Action {
        service: None,
        team: None,
        env: Env::Whole,
        need: Need::Admin,
    };
    assert_eq!(
        authorize(&scope, &create_token, 1_000, false),
        Err(Denied::AdminOnly)
    );
}

#[test]
fn a_clash_and_a_bad_name_are_reported_for_the_user() {
    assert_eq!(
        check_clashes(["DB_HOST", "API_KEY"], ["DB_HOST", "API_KEY", "PORT"]),
        Err(vec!["API_KEY".to_owned(), "DB_HOST".to_owned()])
    );
    assert_eq!(
        validate_name("db-password").unwrap_err().to_string(),
        "secret name `db-password` must be upper-case letters, digits and underscores (e.g. DB_PASSWORD)"
    );
}
