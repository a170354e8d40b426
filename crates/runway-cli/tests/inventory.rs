//! The inventory as a document, end to end: `runway inventory validate|diff|apply` against a
//! real `runway server` (three services onboarded, then one renamed and one removed: the diff
//! says so, apply keeps the removed one until `--prune`), its mistakes named with their file
//! and line, and the CI component (`templates/inventory.yml`) run by `gitlab-ci-local`: a
//! merge request's pipeline diffs with a viewer's identity, which cannot apply; the default
//! branch's applies with an admin's.

#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::gitlab::{Pipeline, TestIssuer, gitlab_ci_local};
use support::{Platform, Ran, Settings};

/// `runway inventory ARGS` in `dir`.
fn inventory(platform: &Platform, dir: &Path, args: &[&str]) -> Ran {
    let mut all = vec!["inventory"];
    all.extend_from_slice(args);
    let mut command = platform.command();
    command.args(&all).current_dir(dir);
    support::run(command, None, support::COMMAND)
}

/// The services there are (previews aside), by name, with what the API says of each.
fn services(platform: &Platform) -> Vec<Value> {
    let listed = platform.runway(&["services", "list", "--output", "json"]);
    assert!(listed.ok(), "{}", listed.all());
    listed.json().as_array().cloned().unwrap_or_default()
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            v.get("name")
                .unwrap_or(v)
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

const FIRST: &str = "# the platform's services\ninventory:\n  - name: api\n    project_id: 101\n    \
                     owners: [api@example.com]\n    members: [alice]\n    environments: [dev, production]\n  \
                     - name: web\n    project_id: 102\n    owners: [web@example.com]\n  - name: jobs\n    \
                     project_id: 103\n    owners: [jobs@example.com]\n    regions: [europe-west4]\n";

/// `web` renamed `frontend` (the same project), `jobs` removed, `api`'s owners changed.
const SECOND: &str = "inventory:\n  - name: api\n    project_id: 101\n    owners: [api@example.com, \
                      sre@example.com]\n    members: [alice]\n    environments: [dev, production]\n  \
                      - name: frontend\n    project_id: 102\n    owners: [web@example.com]\n";

#[test]
fn a_document_onboards_changes_and_decommissions_only_when_pruned() {
    let platform = Platform::start(&Settings::default());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("inventory.yml");
    std::fs::write(&file, FIRST).unwrap();

    let valid = inventory(&platform, dir.path(), &["validate", "inventory.yml"]);
    assert!(valid.ok(), "{}", valid.all());
    assert!(
        valid.stdout.contains("inventory.yml: valid: 3 services"),
        "{}",
        valid.all()
    );

    let diff = inventory(&platform, dir.path(), &["diff", "inventory.yml"]);
    assert!(diff.ok(), "{}", diff.all());
    assert!(
        diff.stdout
            .contains("  + onboard api (owners: api@example.com; environments: dev, production)")
            && diff
                .stdout
                .contains("3 to onboard, 0 to change, 0 to decommission"),
        "{}",
        diff.all()
    );
    assert!(services(&platform).is_empty(), "a diff changed something");

    let applied = inventory(
        &platform,
        dir.path(),
        &["apply", "inventory.yml", "--output", "json"],
    );
    assert!(applied.ok(), "{}", applied.all());
    let plan = applied.json();
    assert_eq!(plan["applied"], true);
    let digest = plan["digest"].as_str().unwrap().to_owned();
    assert!(digest.starts_with("sha256:"), "{plan}");
    let onboarded = services(&platform);
    assert_eq!(names(&json!(onboarded)), ["api", "jobs", "web"]);
    // The web service gets every environment of the server; upstream's keys are kept.
    assert_eq!(
        onboarded[2]["environments"],
        json!(["dev", "staging", "production"])
    );
    assert_eq!(
        onboarded[0]["inventory"],
        json!({"project_id": 101, "members": ["alice"]})
    );
    assert_eq!(
        onboarded[1]["inventory"]["regions"],
        json!(["europe-west4"])
    );

    // Applying it again changes nothing, and is audited again with the same digest.
    let again = inventory(&platform, dir.path(), &["apply", "inventory.yml"]);
    assert!(again.ok(), "{}", again.all());
    assert!(
        again
            .stdout
            .contains("0 onboarded, 0 changed, 0 decommissioned, 0 unlisted and kept, 3 unchanged"),
        "{}",
        again.all()
    );
    let audit = platform.audit(&["--action", "inventory.apply"]);
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert!(
        audit
            .iter()
            .all(|e| e["detail"]["digest"] == digest.as_str()),
        "{audit:?}"
    );

    // `web` renamed, `jobs` removed, `api`'s owners changed: the diff says exactly that.
    std::fs::write(&file, SECOND).unwrap();
    let diff = inventory(
        &platform,
        dir.path(),
        &["diff", "inventory.yml", "--output", "json"],
    );
    assert!(diff.ok(), "{}", diff.all());
    let plan = diff.json();
    assert_eq!(names(&plan["create"]), ["frontend"]);
    assert_eq!(plan["create"][0]["replaces"], "web");
    assert_eq!(
        plan["update"],
        json!([{"name": "api", "changes": [{"field": "owners",
            "from": ["api@example.com"], "to": ["api@example.com", "sre@example.com"]}]}])
    );
    assert_eq!(plan["unlisted"], json!(["jobs", "web"]));
    assert_eq!(plan["decommission"], json!([]));
    let text = inventory(&platform, dir.path(), &["diff", "inventory.yml"]);
    assert!(
        text.stdout
            .contains("its project's service was web: a service is not renamed")
            && text
                .stdout
                .contains("  ? jobs is not listed: kept (--prune decommissions it)"),
        "{}",
        text.all()
    );

    // Without --prune the unlisted services stay; with it they go.
    let kept = inventory(&platform, dir.path(), &["apply", "inventory.yml"]);
    assert!(kept.ok(), "{}", kept.all());
    assert_eq!(
        names(&json!(services(&platform))),
        ["api", "frontend", "jobs", "web"]
    );
    let pruned = inventory(
        &platform,
        dir.path(),
        &["apply", "inventory.yml", "--prune"],
    );
    assert!(pruned.ok(), "{}", pruned.all());
    assert!(
        pruned
            .stdout
            .contains("  - decommissioned jobs (not listed; --prune)"),
        "{}",
        pruned.all()
    );
    assert_eq!(names(&json!(services(&platform))), ["api", "frontend"]);
    let last = &platform.audit(&["--action", "inventory.apply"])[0];
    assert_eq!(
        last["detail"]["decommissioned"],
        json!(["jobs", "web"]),
        "{last}"
    );

    // A mistake is named with its file, line and field, and nothing is sent.
    std::fs::write(
        dir.path().join("bad.yml"),
        "inventory:\n  - name: api\n    project_id: 101\n    owner: [api@example.com]\n",
    )
    .unwrap();
    let invalid = inventory(&platform, dir.path(), &["validate", "bad.yml"]);
    assert_eq!(invalid.code, Some(1), "{}", invalid.all());
    assert!(
        invalid
            .stdout
            .contains("unknown field `owner`; did you mean `owners`?")
            && invalid
                .stdout
                .contains("--> bad.yml:4:5 at inventory[0].owner"),
        "{}",
        invalid.all()
    );
    let refused = inventory(&platform, dir.path(), &["apply", "bad.yml", "--prune"]);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    assert!(
        refused.stderr.contains("nothing was sent"),
        "{}",
        refused.all()
    );
    // What only the server knows, its environments, named with the line too.
    std::fs::write(
        dir.path().join("qa.yml"),
        "inventory:\n  - name: api\n    project_id: 101\n    environments: [dev, qa]\n",
    )
    .unwrap();
    let unknown = inventory(&platform, dir.path(), &["apply", "qa.yml"]);
    assert!(!unknown.ok(), "{}", unknown.all());
    assert!(
        unknown.stderr.contains(
            "qa.yml:4:25: inventory[0].environments[1]: environment `qa` is not one of the server's"
        ),
        "{}",
        unknown.all()
    );
    assert_eq!(names(&json!(services(&platform))), ["api", "frontend"]);
}

/// The component in the inventory's repository: a merge request's pipeline validates and
/// diffs with a viewer's identity (which cannot apply), the default branch's applies with an
/// admin's.
#[test]
fn the_inventory_component_diffs_in_merge_requests_and_applies_on_the_default_branch() {
    let Some(glci) = gitlab_ci_local() else {
        return;
    };
    let issuer = TestIssuer::start();
    let platform = Platform::start(&Settings {
        api: issuer.api_config_with(
            "          - claims: {project_path: platform/inventory, ref: main, ref_protected: 'true'}\n            \
             role: admin\n          - claims: {project_path: platform/inventory}\n            \
             role: viewer\n",
        ),
        ..Settings::default()
    });
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("inventory.yml"), FIRST).unwrap();
    let pipeline = Pipeline::of(
        glci,
        &issuer,
        repo.path(),
        "inventory.yml",
        &format!(
            "stages: [test, deploy]\ninclude:\n  - local: ci/inventory.yml\n    inputs:\n      \
             server: {}\n      ca: {}\n      file: inventory.yml\n",
            platform.api(),
            platform.ca().display()
        ),
    );
    let project = |protected: &str, reference: &str| {
        issuer.token_with(&json!({
            "sub": format!("project_path:platform/inventory:ref_type:branch:ref:{reference}"),
            "project_path": "platform/inventory",
            "job_project_path": "platform/inventory",
            "ref": reference,
            "ref_protected": protected,
        }))
    };
    let review = project("false", "add-services");
    let merge_request = [
        ("CI_PIPELINE_SOURCE", "merge_request_event"),
        ("CI_COMMIT_REF_PROTECTED", "false"),
    ];
    let ran = pipeline.run_as(&[], &review, &merge_request, "review");
    assert!(ran.ok(), "{}\n{}", ran.all(), platform.log());
    for job in ["runway-inventory-validate", "runway-inventory-diff"] {
        assert!(
            ran.stdout.contains(&format!("PASS  {job}")),
            "{job}: {}",
            ran.all()
        );
    }
    assert!(
        !ran.stdout.contains("runway-inventory-apply"),
        "{}",
        ran.all()
    );
    assert!(ran.stdout.contains("3 to onboard"), "{}", ran.all());
    assert!(
        services(&platform).is_empty(),
        "a merge request's pipeline changed something"
    );
    // The viewer's identity cannot apply, even by running the job itself.
    let forced = pipeline.run_as(
        &["runway-inventory-apply"],
        &review,
        &merge_request,
        "review",
    );
    assert!(!forced.ok(), "{}", forced.all());
    assert!(
        forced.stdout.contains("needs a platform admin"),
        "{}",
        forced.all()
    );
    assert!(services(&platform).is_empty());

    let main = project("true", "main");
    let applied = pipeline.run_as(
        &[],
        &main,
        &[
            ("CI_PIPELINE_SOURCE", "push"),
            ("CI_COMMIT_REF_PROTECTED", "true"),
        ],
        "main",
    );
    assert!(applied.ok(), "{}\n{}", applied.all(), platform.log());
    assert!(
        applied.stdout.contains("PASS  runway-inventory-apply"),
        "{}",
        applied.all()
    );
    assert_eq!(names(&json!(services(&platform))), ["api", "jobs", "web"]);
    let audit = platform.audit(&["--action", "inventory.apply"]);
    assert!(
        audit[0]["actor"]
            .as_str()
            .unwrap_or_default()
            .contains("project_path:platform/inventory:ref_type:branch:ref:main"),
        "{audit:?}"
    );
}
