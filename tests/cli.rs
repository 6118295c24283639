//! The `khai` binary's command line and its errors on bad input. No cluster needed: every
//! problem here must be found before khai connects to anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn khai(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run khai")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes a copy of examples/hello into a temp dir with `edit` applied to one file.
fn hello_with(file: &str, edit: impl Fn(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for f in ["operator.toml", "scripts/hello.rhai"] {
        let mut text = std::fs::read_to_string(src.join(f)).unwrap();
        if f == file {
            text = edit(text);
        }
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    dir
}

#[test]
fn version_prints_the_crate_version() {
    let out = khai(&["version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("khai {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn every_command_has_help() {
    for cmd in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["check", "--help"],
        vec!["version", "--help"],
    ] {
        let out = khai(&cmd);
        assert!(out.status.success(), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage: khai"),
            "{cmd:?}"
        );
    }
}

#[test]
fn run_with_a_missing_config_names_the_file_and_fails() {
    let out = khai(&["run", "--config", "/nonexistent/operator.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "error: /nonexistent/operator.toml: no such file or directory"
    );
}

#[test]
fn run_with_invalid_toml_names_file_and_line() {
    let dir = hello_with("operator.toml", |t| {
        t.replace("kind = \"Hello\"", "kind = \"Hello")
    });
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let expected = format!("error: {}/operator.toml:11:", dir.path().display());
    assert!(err.starts_with(&expected), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn run_with_a_script_syntax_error_names_script_and_line() {
    let dir = hello_with("scripts/hello.rhai", |t| {
        t.replace("let message = obj.spec.message;", "let message = ;")
    });
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let expected = format!(
        "error: {}/scripts/hello.rhai:5:19: syntax error:",
        dir.path().display()
    );
    assert!(err.starts_with(&expected), "{err}");
}

#[test]
fn run_with_an_unknown_key_names_the_field() {
    let dir = hello_with("operator.toml", |t| t.replace("owns = ", "own = "));
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("operator.toml:22:1: controller[0].own: unknown field `own`"),
        "{err}"
    );
}

#[test]
fn run_with_a_script_lacking_reconcile_says_which_function() {
    let dir = hello_with("scripts/hello.rhai", |t| {
        t.replace("fn reconcile(obj, ctx)", "fn reconcile(obj)")
    });
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("scripts/hello.rhai: function reconcile(obj, ctx) is not defined"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_accepts_the_hello_example() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let out = khai(&["check", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (1 CRD, 1 controller)"));
}
