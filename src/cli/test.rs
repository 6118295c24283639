//! `khai test`: run an operator's offline test cases (`<dir>/tests/*.yaml`) and report.
//!
//! One line per case (`ok` or `FAIL` with each difference indented under it), then a summary
//! line; the exit code is 1 when any case failed or could not run. The work is in
//! [`crate::testing`]; this file only prints.

use crate::operator::Operator;
use crate::testing::{self, case};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The operator folder: operator.toml (or .yaml) and a tests/ folder of cases.
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let op = Operator::load(&args.dir)?;
    let files = case::find(&args.dir)?;
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        let problems = run_file(&op, file);
        if problems.is_empty() {
            passed += 1;
            println!("ok    {}", file.display());
        } else {
            failed += 1;
            println!("FAIL  {}", file.display());
            for p in problems {
                println!("      {p}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Every problem with one case, as lines to print: its mismatches, or why it could not run.
fn run_file(op: &Operator, file: &Path) -> Vec<String> {
    let result = case::load(file).and_then(|c| testing::run_case(op, &c));
    match result {
        Ok(mismatches) => mismatches.iter().map(ToString::to_string).collect(),
        Err(e) => vec![e.to_string()],
    }
}
