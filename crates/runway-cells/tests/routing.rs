//! GitLab's rules and tokens, decided: each kind of request to its cell, a corrupted token or
//! an unknown cell to the legacy one, and a rule file's mistakes refused with where they are.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use routable_token::{Claims, encode};
use runway_cells::{Action, ClassifyType, RequestView, Rules, StaticTopology};

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn rules() -> Rules {
    Rules::load(&fixture("rules.json")).unwrap()
}

fn topology() -> StaticTopology {
    StaticTopology::load(&fixture("topology.yml")).unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

/// The cell id a request goes to, the deciding rule, and whether it fell back.
fn route(path: &str, pairs: &[(&str, &str)], body: Option<&[u8]>) -> (u64, Option<String>, bool) {
    let headers = headers(pairs);
    let request = RequestView {
        path,
        headers: &headers,
        body_prefix: body,
    };
    let topology = topology();
    let routed = topology.route(rules().decide(&request)).unwrap();
    (
        routed.cell.id,
        routed.decision.rule.clone(),
        routed.fell_back.is_some(),
    )
}

fn runner_token(prefix: &str, cell: u64) -> String {
    encode(
        prefix,
        &Claims::new().with("c", cell).with("o", 1007).with("t", 2),
        &[9; 16],
    )
    .unwrap()
}

#[test]
fn runner_tokens_go_to_their_cell_and_job_tokens_to_the_legacy_one() {
    for cell in [1, 2, 3] {
        let token = runner_token("glrt-", cell);
        assert_eq!(
            route("/api/v4/jobs/request", &[("RUNNER-TOKEN", &token)], None),
            (
                cell,
                Some("session_token_header_runner_token".into()),
                false
            )
        );
        // A trace carries the runner's token here: a job token (`glcbt-`) is a signed JWT,
        // not a routable token, and no rule of GitLab's reads it.
        let job = encode("glcbt-", &Claims::new().with("c", cell), &[1; 16]).unwrap();
        assert_eq!(
            route("/api/v4/jobs/7/trace", &[("JOB-TOKEN", &job)], None)
                .1
                .as_deref(),
            Some("default")
        );
    }
    // GitLab's own fixture: cell 1.
    let gitlab = "glrtr-W5m1cHR6skC98Bx7XkuYjmM6MQpnOjgKbzpyegp0OjIQ.01.181uebm4k";
    assert_eq!(
        route("/api/v4/runners/verify", &[("runner-token", gitlab)], None).0,
        1
    );
}

#[test]
fn a_corrupted_token_or_an_unknown_cell_goes_to_the_legacy_cell() {
    // As GitLab's router, the rule reads the payload, not the checksum (the cell checks the
    // token): a payload that does not decode is what goes astray. Here its length part.
    let token = runner_token("glrt-", 3);
    let at = token.len() - 9;
    let corrupted = format!("{}zz{}", &token[..at], &token[at + 2..]);
    let (cell, rule, _) = route(
        "/api/v4/jobs/request",
        &[("RUNNER-TOKEN", &corrupted)],
        None,
    );
    assert_eq!((cell, rule.as_deref()), (1, Some("default")));

    let unknown = runner_token("glrt-", 9);
    assert_eq!(
        route("/api/v4/jobs/request", &[("RUNNER-TOKEN", &unknown)], None),
        (1, Some("session_token_header_runner_token".into()), true)
    );
    // A cell id beyond 64 bits (GitLab writes an integer of any size): decoded, classified
    // by its decimal digits, and no cell has it.
    let mut huge = Claims::new().with("o", 1007);
    huge.insert_value(
        "c",
        routable_token::ClaimValue::from_decimal("18446744073709551616").unwrap(),
    );
    let huge = encode("glrt-", &huge, &[4; 16]).unwrap();
    let headers = headers(&[("RUNNER-TOKEN", &huge)]);
    let request = RequestView {
        path: "/api/v4/jobs/request",
        headers: &headers,
        body_prefix: None,
    };
    let decision = rules().decide(&request);
    assert_eq!(
        decision.action,
        Action::Classify {
            kind: ClassifyType::CellId,
            value: "18446744073709551616".into()
        }
    );
    let topology = topology();
    let routed = topology.route(decision).unwrap();
    assert_eq!(routed.cell.id, 1);
    assert!(
        routed
            .fell_back
            .as_ref()
            .is_some_and(|reason| reason.to_string().contains("18446744073709551616")),
        "{:?}",
        routed.fell_back
    );
    // A token without `c` (an organization's only) is not validated by the first rule.
    let org_only = encode("glrt-", &Claims::new().with("o", 5), &[2; 16]).unwrap();
    assert_eq!(
        route("/", &[("RUNNER-TOKEN", &org_only)], None)
            .1
            .as_deref(),
        Some("default")
    );
}

#[test]
fn session_cookies_and_force_cell() {
    assert_eq!(
        route(
            "/dashboard",
            &[("cookie", "a=b; _gitlab_session=cell-2-abcdef0123")],
            None
        ),
        (2, Some("session_cookie".into()), false)
    );
    assert_eq!(
        route("/", &[("cookie", "_gitlab_session_1f=cell-3-00ff")], None).0,
        3
    );
    // Not the session cookie by its whole name.
    assert_eq!(
        route("/", &[("cookie", "x_gitlab_session=cell-3-00ff")], None)
            .1
            .as_deref(),
        Some("default")
    );
    assert_eq!(route("/", &[("cookie", "force-cell=cell-2")], None).0, 2);
}

#[test]
fn an_older_runners_body_token_paths_and_the_first_cell() {
    let token = runner_token("glrt-", 3);
    let body = format!(r#"{{"info": {{"token": "x"}}, "token": "{token}", "last_update": "1"}}"#);
    assert_eq!(
        route("/api/v4/jobs/request", &[], Some(body.as_bytes())),
        (3, Some("runner_body_token".into()), false)
    );
    // Cut before the token: not found in the prefix.
    assert_eq!(
        route("/api/v4/jobs/request", &[], Some(&body.as_bytes()[..40]))
            .1
            .as_deref(),
        Some("default")
    );
    assert!(rules().reads_body());
    assert_eq!(route("/-/cells/2/x", &[], None).0, 2);
    assert_eq!(
        route("/-/first", &[], None),
        (1, Some("first_cell_health".into()), false)
    );
}

/// The body is read only when a `json-body` rule comes before the rule that decided.
#[test]
fn the_body_is_needed_only_before_a_json_body_rule_decides() {
    let rules = rules();
    let decide = |pairs: &[(&str, &str)]| {
        let headers = headers(pairs);
        rules.decide(&RequestView {
            path: "/api/v4/jobs/request",
            headers: &headers,
            body_prefix: None,
        })
    };
    let by_header = decide(&[("RUNNER-TOKEN", &runner_token("glrt-", 2))]);
    assert!(!rules.needs_body(&by_header));
    let by_default = decide(&[]);
    assert_eq!(by_default.rule.as_deref(), Some("default"));
    assert!(rules.needs_body(&by_default));
}

#[test]
fn explain_says_why_each_earlier_rule_passed() {
    let headers = headers(&[("cookie", "force-cell=cell-2")]);
    let (decision, passed) = rules().explain(&RequestView {
        path: "/",
        headers: &headers,
        body_prefix: None,
    });
    assert_eq!(decision.rule.as_deref(), Some("force_cell_cookie"));
    assert_eq!(
        decision.action,
        Action::Classify {
            kind: ClassifyType::SessionPrefix,
            value: "cell-2".into()
        }
    );
    let reasons: Vec<String> = passed
        .iter()
        .map(|p| format!("{}: {}", p.rule, p.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            "session_token_header_runner_token: no `runner-token` header",
            "session_cookie: no such cookie",
        ]
    );
}

/// A rule file's mistake: the error, which must hold each of `expected`.
fn refused(text: &str, expected: &[&str]) {
    let error = Rules::parse(Path::new("rules.json"), text)
        .unwrap_err()
        .to_string();
    for part in expected {
        assert!(error.contains(part), "{error:?} lacks {part:?}");
    }
}

#[test]
fn a_rule_files_mistakes_are_refused_with_where_they_are() {
    refused(
        "[{\"id\":\"a\",\"action\":\"proxy\"},\n {\"id\":\"b\",\"action\":\"proxy\",\"matcher\":{}}]",
        &["rules.json:2:", "[1]", "unknown field `matcher`"],
    );
    refused(
        r#"[{"id":"a","match":{"type":"header","name":"x","regexValue":"(unclosed"},"action":"proxy"}]"#,
        &["rule `a`", "match.regexValue", "regular expression"],
    );
    refused(
        r#"[{"id":"a","match":{"type":"header","name":"x","regexValue":"^(?<cell>.+)$"},"action":"classify","classify":{"type":"CELL_ID","value":"${decoded.c}"}}]"#,
        &[
            "rule `a`",
            "classify.value",
            "${decoded.c} names nothing",
            "${cell}",
        ],
    );
    refused(
        r#"[{"id":"a","match":{"type":"header","name":"x","regexValue":"^(?<p>.+)$"},"transform":{"type":"routable-token-payload","input":["${p}"],"output":"decoded"},"action":"proxy"}]"#,
        &["transform.input: 1 inputs, expected 2"],
    );
    refused(
        r#"[{"id":"a","action":"classify"}]"#,
        &["classify: missing"],
    );
    refused(
        r#"[{"id":"a","action":"proxy"},{"id":"a","action":"proxy"}]"#,
        &["[1].id", "rule `a` twice"],
    );
    refused(
        r#"[{"id":"a","match":{"type":"query","name":"x"},"action":"proxy"}]"#,
        &["[0].match.type", "unknown variant `query`"],
    );
    // An older file's header rule, its name a pattern.
    let older = Rules::parse(
        Path::new("r.json"),
        r#"{"id":"h","match":{"type":"header","regex_name":"private-token|runner-token","regex_value":"^(?<v>x.*)$"},"action":"classify","classify":{"type":"CELL_ID","value":"2"}}"#,
    )
    .unwrap();
    let headers = headers(&[("Runner-Token", "xyz")]);
    let decided = older.decide(&RequestView {
        path: "/",
        headers: &headers,
        body_prefix: None,
    });
    assert_eq!(decided.rule.as_deref(), Some("h"));
    // One rule alone, not in a list, is a rule file too.
    let one = Rules::parse(Path::new("r.json"), r#"{"id":"all","action":"proxy"}"#).unwrap();
    assert_eq!(one.len(), 1);
}

#[test]
fn a_topology_files_mistakes_are_refused() {
    let refused = |text: &str, part: &str| {
        let error = StaticTopology::parse(Path::new("t.yml"), text)
            .unwrap_err()
            .to_string();
        assert!(error.contains(part), "{error:?} lacks {part:?}");
    };
    refused(
        "cells: [{id: 1, address: a:1}]\nlegacy_cell: 2\n",
        "legacy_cell: no cell 2",
    );
    refused(
        "cells: [{id: 1, address: a:1}, {id: 1, address: b:1}]\nlegacy_cell: 1\n",
        "cells[1].id: cell 1 twice",
    );
    refused(
        "cells: [{id: 1, adress: a:1}]\nlegacy_cell: 1\n",
        "t.yml:1:",
    );
}

proptest! {
    /// No header, cookie, path or body makes the decision panic, and every decision lands on
    /// a cell of the topology.
    #[test]
    fn any_request_is_decided(
        path in "/[ -~]{0,60}",
        token in "[ -~]{0,120}",
        cookie in "[ -~]{0,80}",
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut map = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(&token) {
            map.insert("runner-token", value);
        }
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            map.insert("cookie", value);
        }
        let request = RequestView { path: &path, headers: &map, body_prefix: Some(&body) };
        let topology = topology();
        let routed = topology.route(rules().decide(&request));
        prop_assert!(routed.is_some());
    }
}
