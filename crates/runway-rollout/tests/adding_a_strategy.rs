//! A strategy added as `docs/dev/adding-a-strategy.md` says: its module (step 2), here with
//! `runway_halfway`, run through the state machine; and the page checked against the code, so
//! that a page gone stale fails here.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};

use runway_rollout::{Action, Command, Kind, Progress, StepInput, Weights, next, plan};
use serde::{Deserialize, Serialize};

// The guide quotes the module from here (its `use` lines are `super::`'s in the crate).

/// Half the traffic once the new revision is ready, held for `pause_ms`, then all of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Halfway {
    /// How long the half is held. Default one minute.
    #[serde(default = "default_pause_ms")]
    pub pause_ms: u64,
}

impl Kind for Halfway {
    fn name(&self) -> &'static str {
        "runway_halfway"
    }

    fn steps(&self) -> &[u32] {
        &[50, 100]
    }

    fn pause_ms(&self) -> u64 {
        self.pause_ms
    }

    fn in_steps(&self) -> bool {
        true
    }
}

// To here.

fn default_pause_ms() -> u64 {
    runway_rollout::DEFAULT_PAUSE_MS
}

/// One call: time, whether the new revision is ready, the command; then the new revision's
/// expected weight and action.
type Row = (u64, bool, Option<Command>, u32, &'static str);

fn kind(action: &Action) -> &'static str {
    match action {
        Action::Hold { .. } => "hold",
        Action::Advance => "advance",
        Action::Complete => "complete",
        Action::RollBack { .. } => "rollback",
        Action::Switch => "switch",
        Action::WaitReady => "wait",
        Action::DryRun { .. } => "dryrun",
    }
}

fn run(strategy: &dyn Kind, rows: &[Row]) {
    let mut progress = Progress::new(0);
    for (i, &(now_ms, new_ready, command, new, action)) in rows.iter().enumerate() {
        let input = StepInput {
            now_ms,
            new_ready,
            verdict: None,
            command,
        };
        let step = next(strategy, &progress, &input);
        assert_eq!(
            (step.weights.new, kind(&step.action)),
            (new, action),
            "row {i} (t={now_ms}): {step:?}"
        );
        progress = step.progress;
    }
}

#[test]
fn the_new_strategy_runs_through_the_state_machine() {
    let halfway = Halfway { pause_ms: 60_000 };
    assert_eq!(halfway.check(), Ok(()));
    run(
        &halfway,
        &[
            (0, false, None, 0, "wait"),
            (1_000, true, None, 50, "advance"),
            (30_000, true, None, 50, "hold"),
            (61_000, false, None, 50, "wait"),
            (62_000, true, None, 100, "complete"),
            (63_000, true, Some(Command::Abort), 100, "complete"),
        ],
    );
    // What every strategy gets without a line of its own: an operator's pause, promote and
    // abort.
    run(
        &halfway,
        &[
            (0, true, None, 50, "advance"),
            (1_000, true, Some(Command::Pause), 50, "hold"),
            (120_000, true, None, 50, "hold"),
            (121_000, true, Some(Command::Promote), 100, "complete"),
        ],
    );
    run(
        &halfway,
        &[
            (0, true, None, 50, "advance"),
            (1_000, true, Some(Command::Abort), 0, "rollback"),
        ],
    );

    let steps: Vec<(Weights, String)> = plan(&halfway)
        .into_iter()
        .map(|step| (step.weights, step.when))
        .collect();
    assert_eq!(
        steps,
        [
            (
                Weights::new(0),
                "start the new revision; no traffic until it is fully ready".to_owned()
            ),
            (Weights::new(50), "once ready".to_owned()),
            (
                Weights::new(100),
                "after 60 s at 50 %: all traffic, then stop the old revision".to_owned()
            ),
        ]
    );
    // What the executor and the API ask.
    assert_eq!(
        (
            halfway.is_dry_run(),
            halfway.in_steps(),
            halfway.analysis().is_some(),
            halfway.stages_at_full_capacity(),
            halfway.keeps_old_ms(),
        ),
        (false, true, false, false, None)
    );
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// The Rust blocks of a Markdown page.
fn rust_blocks(page: &str) -> Vec<&str> {
    page.split("```rust\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .collect()
}

/// The `.rs` files under `dir`, as paths from the workspace's root.
fn sources(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let root = root().canonicalize().unwrap();
            let relative = path.canonicalize().unwrap();
            let relative = relative.strip_prefix(&root).unwrap();
            found.push(relative.to_string_lossy().into_owned());
        }
    }
}

/// The paths in a Markdown text's code spans.
fn paths(text: &str) -> Vec<&str> {
    text.split('`')
        .filter(|word| {
            ["crates/", "docs/", "schemas/", "templates/"]
                .iter()
                .any(|p| word.starts_with(p))
        })
        .collect()
}

/// Whether a line of code (not a comment) names `word` whole.
fn names(code: &str, word: &str) -> bool {
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .any(|line| {
            line.match_indices(word).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + word.len()..].chars().next();
                let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !ident(before) && !ident(after)
            })
        })
}

/// The guide quotes this file's module and the lines `strategy/mod.rs` has for every
/// strategy; names every method of `Kind`; names files that are there; and no file it does not
/// name names a strategy (the executor and the API ask, they do not match).
#[test]
fn the_guide_says_what_the_code_does() {
    let guide = read("docs/dev/adding-a-strategy.md");
    let blocks = rust_blocks(&guide);

    let module = blocks
        .iter()
        .find(|block| block.contains("impl Kind for Halfway"))
        .expect("the guide quotes the new strategy's module");
    let this = include_str!("adding_a_strategy.rs");
    assert!(this.contains(module), "the guide quotes:\n{module}");

    // Step 3's lines, with `Halfway` as each strategy with settings, are in `mod.rs`.
    let wiring = blocks
        .iter()
        .find(|block| block.contains("Halfway(Halfway)"))
        .expect("the guide quotes the lines of strategy/mod.rs");
    let code = read("crates/runway-rollout/src/strategy/mod.rs");
    for (ours, manifest, value, module) in [
        ("Canary", "RunwayCanary", "runway_canary", "canary"),
        (
            "BlueGreen",
            "RunwayBlueGreen",
            "runway_blue_green",
            "blue_green",
        ),
        (
            "RegionalRollout",
            "RegionalRollout",
            "regional_rollout",
            "regional_rollout",
        ),
    ] {
        for line in wiring.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let line = line
                .replace("RunwayHalfway", manifest)
                .replace("runway_halfway", value)
                .replace("Halfway", ours)
                .replace("halfway", module);
            assert!(
                code.lines().any(|l| l.trim() == line),
                "strategy/mod.rs has no line `{line}`, which the guide's step 3 says each \
                 strategy has"
            );
        }
    }

    let kind = code
        .split("pub trait Kind {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .unwrap();
    let methods: Vec<&str> = kind
        .split("    fn ")
        .skip(1)
        .filter_map(|rest| rest.split(['(', '<']).next())
        .collect();
    assert!(methods.len() > 5, "{methods:?}");
    for method in methods {
        assert!(
            guide.contains(&format!("`{method}`")),
            "the guide says nothing of Kind::{method}"
        );
    }

    for path in paths(&guide) {
        assert!(
            root().join(path).exists(),
            "the guide names {path}, which is not there"
        );
    }

    // Where code names a strategy: the files the guide's steps say to touch, and the
    // strategies' own directory. The words are the manifest's variants and runway-rollout's
    // (qualified where the word is common).
    let steps = guide
        .split("\n1. ")
        .nth(1)
        .and_then(|rest| rest.split("\nNothing in").next())
        .expect("the guide's steps, then what changes nowhere else");
    let named = paths(steps);
    let words = [
        "Strategy::Legacy",
        "Expedited",
        "RegionalRollout",
        "Dryrun",
        "Strategy::DryRun",
        "Canary",
        "RunwayCanary",
        "BlueGreen",
        "RunwayBlueGreen",
    ];
    let known: [&str; 0] = [];
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    let strategies = "crates/runway-rollout/src/strategy/";
    let mut unnamed = Vec::new();
    for file in &files {
        let listed = file.starts_with(strategies)
            || named.iter().any(|n| n == file)
            || known.contains(&file.as_str());
        let text = read(file);
        if !listed && words.iter().any(|word| names(&text, word)) {
            unnamed.push(file.clone());
        }
    }
    assert!(
        unnamed.is_empty(),
        "these files name a strategy, and the guide does not say to touch them: {unnamed:?}; \
         ask the strategy (runway_rollout::Kind) there instead, or say so in the guide"
    );
}
