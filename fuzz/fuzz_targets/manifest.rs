//! Any bytes as a manifest, an override, an environment file and an inventory document: loading
//! must never panic, and every error must carry a location inside the file it names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runway_manifest::{ServiceFiles, SourceFile, load};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // The same text as a base manifest, as an override of a valid base, and as variables.
    let base = "apiVersion: runway/v1\nkind: RunwayService\nmetadata:\n  name: fuzz\nspec: {}\n";
    let mut files = ServiceFiles { base: Some(SourceFile::new("runway.yml", text)), ..ServiceFiles::default() };
    check(&files, text);
    files.base = Some(SourceFile::new("runway.yml", base));
    files.overrides.insert("prod".into(), SourceFile::new("runway-prod.yml", text));
    files.env_files.insert("prod".into(), SourceFile::new("env-prod.yml", text));
    check(&files, text);
    let inventory = runway_manifest::load_inventory(&SourceFile::new("inventory.yml", text), &["prod".to_owned()]);
    assert!(inventory.inventory.is_some() == inventory.diagnostics.is_empty(), "{text:?}");
    let count = runway_manifest::yaml_lines(text).len().max(1);
    for d in &inventory.diagnostics {
        if let Some(at) = &d.location {
            assert!(at.line >= 1 && at.line <= count + 1 && at.column >= 1, "{d} is outside {text:?}");
        }
    }
});

fn check(files: &ServiceFiles, text: &str) {
    let loaded = load(files);
    let sources = files.base.iter().chain(files.overrides.values()).chain(files.env_files.values());
    let lines: Vec<(&str, usize)> = sources.map(|f| (f.name.as_ref(), runway_manifest::yaml_lines(&f.text).len().max(1))).collect();
    for d in &loaded.diagnostics {
        if let Some(at) = &d.location {
            let known = lines.iter().find(|(name, _)| *name == at.file.as_ref());
            let (_, count) = known.unwrap_or_else(|| panic!("{d} names a file that was not given"));
            assert!(at.line >= 1 && at.line <= count + 1 && at.column >= 1, "{d} is outside {text:?}");
        }
    }
    if let Some(service) = loaded.service {
        let _ = service.config(None);
        let _ = service.config(Some("prod"));
    }
}
