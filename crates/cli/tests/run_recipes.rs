//! Every recipe of docs/RECIPES.md (the files in docs/recipes) passes
//! `pspat config check` and builds its classifier and all its pipes
//! (`pspat run --dry-run`), and every recipe the page names exists.

use std::path::PathBuf;
use std::process::Command;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

fn recipes() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(docs().join("recipes"))
        .expect("docs/recipes")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ipfw" || e == "toml"))
        .collect();
    files.sort();
    files
}

fn pspat(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pspat"))
        .args(args)
        .output()
        .expect("run pspat");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_recipe_checks_and_builds() {
    let files = recipes();
    assert!(files.len() >= 9, "{files:?}");
    for f in &files {
        let name = f.to_str().unwrap();
        let (ok, _, err) = pspat(&["config", "check", name]);
        assert!(ok, "config check {name}: {err}");
        let (ok, out, err) = pspat(&["run", name, "--dry-run"]);
        assert!(ok, "run --dry-run {name}: {err}");
        assert!(out.starts_with(&format!("run: {name}: ")), "{out}");
        // Every pipe and sched of the file is built, and the pass pipe.
        let (ok, plan, err) = pspat(&["config", "check", name, "--json"]);
        assert!(ok, "{err}");
        let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
        for kind in ["pipes", "scheds"] {
            for number in plan[kind].as_object().unwrap().keys() {
                let n: u32 = number.parse().unwrap();
                assert!(
                    out.contains(&format!("\n{n:05}: ")),
                    "{name}: link {n} in {out}"
                );
            }
        }
        assert!(out.contains("\npass : unlimited"), "{out}");
    }
}

#[test]
fn every_recipe_the_page_names_exists() {
    let page = std::fs::read_to_string(docs().join("RECIPES.md")).expect("docs/RECIPES.md");
    let files: Vec<String> = recipes()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut named = 0;
    for word in page.split(|c: char| c == '`' || c == '(' || c == ')' || c.is_whitespace()) {
        if let Some(f) = word.strip_prefix("recipes/") {
            if f.ends_with(".ipfw") || f.ends_with(".toml") {
                assert!(files.iter().any(|x| x == f), "{f} named but missing");
                named += 1;
            }
        }
    }
    for f in &files {
        assert!(
            page.contains(&format!("recipes/{f}")),
            "{f} not on the page"
        );
    }
    assert!(named >= files.len());
}
