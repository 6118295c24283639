//! khai's modules do not import each other in circles.
//!
//! Every `crate::…` and `super::…` path in `src/` is an edge from the module that writes it to
//! the module it names. Edges between a module and its own ancestors or descendants are how Rust
//! modules work (a parent declares its children; children use their parent's types) and are not
//! counted; every other edge is lifted to the two sibling modules under their closest common
//! ancestor (`config::validate::crd` → `config::validate::fields` is an edge `crd → fields` among
//! the children of `config::validate`). Among siblings there must be no cycle: a module and the
//! ones it uses can be read, changed and tested before the ones that use it.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and string literals, and without `#[cfg(test)]`
/// modules (tests may reach anywhere).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut in_str = false;
        let mut prev = ' ';
        for c in line.chars() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// Paths written as `root::a::b` (also inside `root::{a::b, c}`), as lists of segments.
fn paths(code: &str, root: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let pat = format!("{root}::");
    let mut rest = code;
    while let Some(i) = rest.find(&pat) {
        let before = rest[..i].chars().last();
        rest = &rest[i + pat.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(inner) = rest.strip_prefix('{') {
            let end = inner.find('}').unwrap_or(inner.len());
            for item in inner[..end].split(',') {
                out.push(segments(item.trim()));
            }
        } else {
            out.push(segments(rest));
        }
    }
    out
}

fn segments(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) if !r.starts_with('{') => rest = r,
            _ => break,
        }
    }
    segs
}

/// The longest prefix of `path` that is a module.
fn resolve(path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// Edges among the children of each module (the crate root is the empty module), and for each
/// edge the first path that makes it.
type Graphs = BTreeMap<Module, BTreeMap<String, BTreeSet<String>>>;
type Why = BTreeMap<(Module, String, String), String>;

fn graphs() -> (Graphs, Why) {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeSet<Module> = all.iter().map(|f| module_of(&src, f)).collect();
    let mut graphs: Graphs = BTreeMap::new();
    let mut why: Why = BTreeMap::new();
    for file in &all {
        let from = module_of(&src, file);
        let text = code(&std::fs::read_to_string(file).unwrap());
        let mut targets: Vec<Vec<String>> = paths(&text, "crate");
        for p in paths(&text, "super") {
            // `super` of a file module is its parent (`super::super` is rare enough to skip).
            let mut parent = from.clone();
            parent.pop();
            targets.push(parent.into_iter().chain(p).collect());
        }
        for t in targets {
            let Some(to) = resolve(&t, &modules) else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // ancestor or descendant
            }
            let (a, b) = (from[common].clone(), to[common].clone());
            let parent = from[..common].to_vec();
            why.entry((parent.clone(), a.clone(), b.clone()))
                .or_insert_with(|| format!("{} uses {}", from.join("::"), t.join("::")));
            graphs
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .insert(b);
        }
    }
    (graphs, why)
}

#[test]
fn top_level_modules_use_only_the_layers_below_them() {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"),
    )
    .unwrap();
    let section = &doc[doc
        .find("### Layers")
        .expect("docs/architecture.md has ### Layers")..];
    let list = section.split("\n\n").nth(2).unwrap();
    let layers: Vec<&str> = list
        .split('·')
        .map(|m| m.trim().trim_matches('`'))
        .collect();
    let (graphs, why) = graphs();
    let root = &graphs[&Vec::new()];
    let place = |m: &str| layers.iter().position(|l| *l == m);
    let mut wrong = Vec::new();
    for (from, tos) in root {
        if matches!(from.as_str(), "lib" | "main") {
            continue;
        }
        let Some(at) = place(from) else {
            wrong.push(format!("{from} is not in the layer list"));
            continue;
        };
        for to in tos {
            match place(to) {
                Some(below) if below < at => {}
                _ => wrong.push(format!(
                    "{from} uses {to}, which is not below it ({})",
                    why[&(Vec::new(), from.clone(), to.clone())]
                )),
            }
        }
    }
    for l in &layers {
        assert!(
            root.contains_key(*l) || root.values().any(|t| t.contains(*l)),
            "{l} is listed as a layer but is no module of src/"
        );
    }
    assert!(wrong.is_empty(), "layering:\n{}", wrong.join("\n"));
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let (graphs, why) = graphs();
    let mut cycles = Vec::new();
    for (parent, graph) in &graphs {
        for start in graph.keys() {
            // A path from `start` back to itself, through nodes greater than `start` (each
            // cycle is reported once, from its smallest member).
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            while let Some((node, path)) = stack.pop() {
                for next in graph.get(&node).into_iter().flatten() {
                    if next == start {
                        let mut c = path.clone();
                        c.push(start.clone());
                        let reasons: Vec<String> = c
                            .windows(2)
                            .map(|w| why[&(parent.clone(), w[0].clone(), w[1].clone())].clone())
                            .collect();
                        cycles.push(format!(
                            "in {}: {} ({})",
                            if parent.is_empty() {
                                "crate".into()
                            } else {
                                parent.join("::")
                            },
                            c.join(" -> "),
                            reasons.join("; ")
                        ));
                    } else if next > start && !path.contains(next) {
                        let mut p = path.clone();
                        p.push(next.clone());
                        stack.push((next.clone(), p));
                    }
                }
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}
