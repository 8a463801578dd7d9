//! Every number in README's "Measured results" section appears in a committed file under
//! `bench/results/`: literally, or as a number there rounded to the README's precision
//! (`192.9` matches `192.91473` in a JSON file). A claim with no file behind it fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Numbers in `text`, as written: digits with at most one `.` between digits. A number
/// glued to a letter or `_` on its left (`R12`, `v3`, `sm_90`, `x86_64`) is a name, not a
/// number, and so is one inside a date (`2026-11-22`) or a version (`0.3.1`).
fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_digit()
                || (chars[i] == '.' && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit())))
        {
            i += 1;
        }
        let before = start.checked_sub(1).map(|b| chars[b]);
        let after = chars.get(i).copied();
        let name = before.is_some_and(|c| c.is_alphabetic() || c == '_');
        let dated = (before == Some('-') && start >= 2 && chars[start - 2].is_ascii_digit())
            || (after == Some('-') && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()));
        let token: String = chars[start..i].iter().collect();
        let version = token.matches('.').count() > 1
            || (after == Some('.') && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()));
        if !name && !dated && !version {
            out.push(token);
        }
    }
    out
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("json" | "md" | "txt" | "jsonl" | "csv")
        ) {
            out.push(p);
        }
    }
}

#[test]
fn every_number_in_the_results_section_is_in_a_results_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split_once("## Measured results")
        .expect("README has a results section")
        .1;
    let section = section.split("\n## ").next().unwrap();
    let mut paths = Vec::new();
    files(&root.join("bench/results"), &mut paths);
    assert!(!paths.is_empty());
    // Every number of every results file, as written, and rounded to 0-3 decimals.
    let mut known: HashSet<String> = HashSet::new();
    for p in &paths {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        for n in numbers(&text) {
            if let Ok(v) = n.parse::<f64>() {
                for d in 0..=3 {
                    known.insert(format!("{v:.d$}"));
                }
            }
            known.insert(n);
        }
    }
    let missing: Vec<String> = numbers(section)
        .into_iter()
        .filter(|n| !known.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "numbers in README's results section found in no file under bench/results/: {missing:?}"
    );
}

#[test]
fn numbers_are_read_as_written() {
    assert_eq!(
        numbers("R12 ran 192.9 GFLOPS, 0.87× on 2026-11-22 with v3 and 0.3.1; 95%."),
        ["192.9", "0.87", "95"]
    );
}
