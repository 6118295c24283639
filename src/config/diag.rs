//! Diagnostics that point at the author's own text: `file:line:col: field.path: message`.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in a config file, located as precisely as the format allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based line and column, when known.
    pub position: Option<(usize, usize)>,
    /// Field path such as `controller[0].for`; empty for syntax errors.
    pub path: String,
    pub message: String,
}

impl Diagnostic {
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            position: None,
            path: String::new(),
            message: message.into(),
        }
    }

    #[must_use]
    pub fn at(mut self, position: Option<(usize, usize)>) -> Self {
        self.position = position;
        self
    }

    #[must_use]
    pub fn field(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// serde's "unknown field `KEY`, expected …" with an odd KEY made readable. A key that runs long
/// or holds quotes or control characters (a multi-line YAML scalar, say) is shown escaped, in
/// double quotes, cut to its first [`KEY_SHOWN`] characters, with its length: backticks inside
/// the key no longer end its quotes early, and the message stays one readable line. Other
/// messages pass unchanged.
pub(crate) fn tidy_unknown_field(message: &str) -> String {
    let tidy = || {
        let rest = message.strip_prefix("unknown field `")?;
        let end = rest
            .rfind("`, expected ")
            .or_else(|| rest.rfind("`, there are no fields"))?;
        let (key, tail) = (rest.get(..end)?, rest.get(end + 1..)?);
        let chars = key.chars().count();
        let odd =
            chars > KEY_SHOWN || key.contains(['`', '"']) || key.chars().any(char::is_control);
        if !odd {
            return None;
        }
        let shown: String = key.chars().take(KEY_SHOWN).collect();
        Some(if chars > KEY_SHOWN {
            format!("unknown field {shown:?}… ({chars} characters){tail}")
        } else {
            format!("unknown field {shown:?}{tail}")
        })
    };
    tidy().unwrap_or_else(|| message.to_string())
}

/// How much of an odd unknown key [`tidy_unknown_field`] shows.
const KEY_SHOWN: usize = 60;

/// Turns a byte offset into a 1-based (line, column), counting columns in characters.
pub(crate) fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, col)
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&word.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance: edits plus adjacent transpositions, so "Cahce" is one
/// step from "Cache".
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// `s` quoted, cut to 60 characters with its length when longer, so a huge value does not make
/// a huge message.
pub(crate) fn shorten(s: &str) -> String {
    let n = s.chars().count();
    if n <= 60 {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(60).collect();
        format!("{head:?}… ({n} characters)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let src = "a = 1\nbb = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 6), (2, 1));
        assert_eq!(line_col(src, 9), (2, 4));
    }

    /// Found by fuzzing (`config_yaml`, 2026-11-26): a 2,000-character YAML key holding
    /// backticks was quoted whole in backticks, so the message's quoting broke.
    #[test]
    fn an_odd_unknown_key_is_shown_escaped_and_short() {
        let plain = "unknown field `own`, expected one of `for`, `owns`";
        assert_eq!(tidy_unknown_field(plain), plain);
        assert_eq!(
            tidy_unknown_field("unknown field `a`b\nc`, expected `for`"),
            r#"unknown field "a`b\nc", expected `for`"#
        );
        let long = format!("unknown field `{}`, there are no fields", "x".repeat(100));
        assert_eq!(
            tidy_unknown_field(&long),
            format!(
                "unknown field \"{}\"… (100 characters), there are no fields",
                "x".repeat(60)
            )
        );
        assert_eq!(
            tidy_unknown_field("invalid type: string"),
            "invalid type: string"
        );
    }

    #[test]
    fn did_you_mean_finds_a_typo_but_not_a_stranger() {
        assert_eq!(did_you_mean("Cahce", ["Cache", "Hello"]), Some("Cache"));
        assert_eq!(did_you_mean("Database", ["Cache", "Hello"]), None);
    }

    #[test]
    fn diagnostic_display_is_file_line_col_path_message() {
        let d = Diagnostic::new(Path::new("operator.toml"), "unknown kind \"Cahce\"")
            .at(Some((14, 3)))
            .field("controller[0].for");
        assert_eq!(
            d.to_string(),
            "operator.toml:14:3: controller[0].for: unknown kind \"Cahce\""
        );
    }
}
