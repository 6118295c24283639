//! Label and field selectors checked as the API server parses them
//! (`k8s.io/apimachinery/pkg/labels.Parse` and `fields.ParseSelector`), and the names they hold.
//!
//! A `selector` or `field_selector` goes into every list and watch of the controller's kind: one
//! the API server cannot parse fails every list with a 400, so the controller's cache never syncs
//! and khai is never ready. `khai check` finds it first, with the reason in words.

/// Why a label selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    #[error("expected a label key {0}")]
    ExpectedKey(String),
    #[error("label key {key:?}: {why}")]
    BadKey { key: String, why: String },
    #[error("label value {value:?}: {why}")]
    BadValue { value: String, why: String },
    #[error("expected `=`, `==`, `!=`, `in`, `notin`, `>`, `<` or `,` after {0:?}, found {1:?}")]
    ExpectedOperator(String, String),
    #[error("expected `(` after `{0}`")]
    ExpectedOpen(&'static str),
    #[error("the set of values after `{0}` is not closed with `)`")]
    Unclosed(&'static str),
    #[error("the set of values after `{0}` is empty")]
    EmptySet(&'static str),
    #[error("`{op}` needs a whole number, not {value:?}")]
    NotANumber { op: &'static str, value: String },
    #[error("expected `,` between requirements, found {0:?}")]
    ExpectedComma(String),
}

/// Why a field selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FieldSelectorError {
    #[error("{0:?} has no `=`, `==` or `!=`")]
    NoOperator(String),
    #[error("{0:?} names no field")]
    NoField(String),
    #[error("the value of {term:?} holds an unescaped {found:?} (write it as `\\{found}`)")]
    Unescaped { term: String, found: char },
    #[error(
        "the value of {term:?} holds the escape `\\{found}`; only `\\\\`, `\\,` and `\\=` are escapes"
    )]
    BadEscape { term: String, found: String },
}

/// Checks a label selector (`app=web,tier!=db`, `env in (a,b)`, `!canary`); an empty one selects
/// everything.
pub(crate) fn check_label_selector(s: &str) -> Result<(), SelectorError> {
    let mut lexer = Lexer::new(s);
    if lexer.peek() == Token::End {
        return Ok(());
    }
    loop {
        requirement(&mut lexer)?;
        match lexer.next() {
            Token::End => return Ok(()),
            Token::Comma => {}
            other => return Err(SelectorError::ExpectedComma(other.text())),
        }
    }
}

/// One requirement: `!key`, `key`, `key op value` or `key in|notin (values)`.
fn requirement(lexer: &mut Lexer) -> Result<(), SelectorError> {
    let key = match lexer.next() {
        Token::Not => match lexer.next() {
            Token::Word(k) => {
                check_key(&k)?;
                return Ok(());
            }
            other => {
                return Err(SelectorError::ExpectedKey(format!(
                    "after `!`, found {:?}",
                    other.text()
                )));
            }
        },
        Token::Word(k) => k,
        Token::End => return Err(SelectorError::ExpectedKey("at the end".into())),
        other => {
            return Err(SelectorError::ExpectedKey(format!(
                "before {:?}",
                other.text()
            )));
        }
    };
    check_key(&key)?;
    match lexer.peek() {
        Token::End | Token::Comma => Ok(()),
        Token::Eq | Token::DoubleEq | Token::NotEq => {
            lexer.next();
            match lexer.peek() {
                Token::Word(v) => {
                    lexer.next();
                    check_value(&v)
                }
                // `key=` selects an empty value.
                _ => Ok(()),
            }
        }
        Token::Gt | Token::Lt => {
            let op = if lexer.next() == Token::Gt { ">" } else { "<" };
            match lexer.next() {
                Token::Word(v) if v.parse::<i64>().is_ok() => Ok(()),
                other => Err(SelectorError::NotANumber {
                    op,
                    value: other.text(),
                }),
            }
        }
        Token::Word(w) if w == "in" || w == "notin" => {
            let op = if w == "in" { "in" } else { "notin" };
            lexer.next();
            set(lexer, op)
        }
        other => Err(SelectorError::ExpectedOperator(key, other.text())),
    }
}

/// `( value, value, ... )`, not empty.
fn set(lexer: &mut Lexer, op: &'static str) -> Result<(), SelectorError> {
    if lexer.next() != Token::Open {
        return Err(SelectorError::ExpectedOpen(op));
    }
    let mut values = 0;
    loop {
        match lexer.next() {
            Token::Close => break,
            Token::Word(v) => {
                check_value(&v)?;
                values += 1;
            }
            // An empty value between commas is the empty string.
            Token::Comma => continue,
            _ => return Err(SelectorError::Unclosed(op)),
        }
        match lexer.next() {
            Token::Close => break,
            Token::Comma => {}
            _ => return Err(SelectorError::Unclosed(op)),
        }
    }
    if values == 0 {
        return Err(SelectorError::EmptySet(op));
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), SelectorError> {
    qualified_name(key).map_err(|why| SelectorError::BadKey {
        key: key.into(),
        why,
    })
}

fn check_value(value: &str) -> Result<(), SelectorError> {
    label_value(value).map_err(|why| SelectorError::BadValue {
        value: value.into(),
        why,
    })
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63 characters.
pub(crate) fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("the prefix before `/` is empty".into());
        }
        if !is_dns_subdomain(p) {
            return Err(format!(
                "the prefix {p:?} is not a DNS subdomain (lower-case letters, digits, `-` and `.`, at most 253)"
            ));
        }
    }
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    label_value(name)
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_` and `.`, starting and ending
/// with a letter or digit.
pub(crate) fn label_value(v: &str) -> Result<(), String> {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if !v.chars().all(inner) || !ends(v.chars().next()) || !ends(v.chars().last()) {
        return Err(
            "only letters, digits, `-`, `_` and `.` are allowed, starting and ending with a letter or digit"
                .into(),
        );
    }
    // ASCII from here on: bytes are characters.
    if v.len() > 63 {
        return Err(format!("{} characters, more than 63", v.len()));
    }
    Ok(())
}

/// A DNS-1123 label: at most 63 lower-case letters, digits and `-`, starting and ending with a
/// letter or digit (namespace names, among others).
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: at most 253 characters of dot-separated DNS labels.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Checks a field selector (`metadata.name=x,status.phase!=Running`); an empty one selects
/// everything. Which fields a kind can be selected by is the API server's to say (custom
/// resources: `metadata.name` and `metadata.namespace` only).
pub(crate) fn check_field_selector(s: &str) -> Result<Vec<String>, FieldSelectorError> {
    let mut fields = Vec::new();
    for term in split_unescaped(s) {
        if term.is_empty() {
            continue;
        }
        // The first operator, as the API server's `splitTerm` finds it.
        let at = (0..term.len())
            .filter(|i| term.is_char_boundary(*i))
            .find_map(|i| {
                ["!=", "==", "="]
                    .iter()
                    .find(|op| term[i..].starts_with(**op))
                    .map(|op| (i, op.len()))
            });
        let Some((i, len)) = at else {
            return Err(FieldSelectorError::NoOperator(term.to_string()));
        };
        let (field, value) = (&term[..i], &term[i + len..]);
        if field.is_empty() {
            return Err(FieldSelectorError::NoField(term.to_string()));
        }
        unescape(term, value)?;
        fields.push(field.to_string());
    }
    Ok(fields)
}

/// `s` split at every `,` not escaped with `\`.
fn split_unescaped(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Checks a field selector value's escapes, as the API server's `UnescapeValue` does.
fn unescape(term: &str, value: &str) -> Result<(), FieldSelectorError> {
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\' | ',' | '=') => {}
                other => {
                    return Err(FieldSelectorError::BadEscape {
                        term: term.into(),
                        found: other.map(String::from).unwrap_or_default(),
                    });
                }
            },
            ',' | '=' => {
                return Err(FieldSelectorError::Unescaped {
                    term: term.into(),
                    found: c,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// A token of a label selector, as the API server's lexer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    Comma,
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Word(String),
}

impl Token {
    /// The token as written, for messages.
    fn text(&self) -> String {
        match self {
            Token::End => "the end".into(),
            Token::Comma => ",".into(),
            Token::Not => "!".into(),
            Token::Eq => "=".into(),
            Token::DoubleEq => "==".into(),
            Token::NotEq => "!=".into(),
            Token::Gt => ">".into(),
            Token::Lt => "<".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Word(w) => w.clone(),
        }
    }
}

struct Lexer<'s> {
    rest: &'s str,
}

impl<'s> Lexer<'s> {
    fn new(s: &'s str) -> Self {
        Lexer { rest: s }
    }

    fn peek(&self) -> Token {
        Lexer { rest: self.rest }.next()
    }

    fn next(&mut self) -> Token {
        self.rest = self.rest.trim_start();
        let special = |c: char| c.is_whitespace() || "!=,()<>".contains(c);
        let (token, len) = match self.rest.chars().next() {
            None => (Token::End, 0),
            Some(',') => (Token::Comma, 1),
            Some('(') => (Token::Open, 1),
            Some(')') => (Token::Close, 1),
            Some('>') => (Token::Gt, 1),
            Some('<') => (Token::Lt, 1),
            Some('!') if self.rest.starts_with("!=") => (Token::NotEq, 2),
            Some('!') => (Token::Not, 1),
            Some('=') if self.rest.starts_with("==") => (Token::DoubleEq, 2),
            Some('=') => (Token::Eq, 1),
            Some(_) => {
                let len = self.rest.find(special).unwrap_or(self.rest.len());
                (Token::Word(self.rest[..len].to_string()), len)
            }
        };
        self.rest = &self.rest[len..];
        token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_the_api_server_parses_pass() {
        for s in [
            "",
            "app",
            "!app",
            "app=web",
            "app==web,tier!=db",
            "app=",
            " app = web , tier in (a, b) ",
            "env notin (prod)",
            "example.com/team=a",
            "replicas>1,size<10",
            "a in (x,,y)",
        ] {
            assert_eq!(check_label_selector(s), Ok(()), "{s:?}");
        }
    }

    #[test]
    fn label_selectors_the_api_server_refuses_say_why() {
        let cases = [
            ("app=web,,tier", "expected a label key before \",\""),
            ("app=web,", "expected a label key at the end"),
            (
                "app===web",
                "expected `,` between requirements, found \"=\"",
            ),
            (
                "Bad Key=x",
                "expected `=`, `==`, `!=`, `in`, `notin`, `>`, `<` or `,` after \"Bad\", found \"Key\"",
            ),
            ("app=we b", "expected `,` between requirements, found \"b\""),
            (
                "app=-web",
                "label value \"-web\": only letters, digits, `-`, `_` and `.` are allowed, starting and ending with a letter or digit",
            ),
            (
                "a in (x",
                "the set of values after `in` is not closed with `)`",
            ),
            ("a in ()", "the set of values after `in` is empty"),
            ("a in x", "expected `(` after `in`"),
            ("a>b", "`>` needs a whole number, not \"b\""),
            (
                "Example.com/x=1",
                "label key \"Example.com/x\": the prefix \"Example.com\" is not a DNS subdomain (lower-case letters, digits, `-` and `.`, at most 253)",
            ),
            ("/x", "label key \"/x\": the prefix before `/` is empty"),
            ("!", "expected a label key after `!`, found \"the end\""),
        ];
        for (s, want) in cases {
            let got = check_label_selector(s).unwrap_err().to_string();
            assert_eq!(got, want, "{s:?}");
        }
        let long = format!("a={}", "v".repeat(64));
        assert_eq!(
            check_label_selector(&long).unwrap_err().to_string(),
            format!(
                "label value \"{}\": 64 characters, more than 63",
                "v".repeat(64)
            )
        );
    }

    #[test]
    fn field_selectors_parse_as_the_api_server_parses_them() {
        assert_eq!(check_field_selector(""), Ok(vec![]));
        assert_eq!(
            check_field_selector("metadata.name=a,status.phase!=Running,x==\\,y"),
            Ok(vec![
                "metadata.name".into(),
                "status.phase".into(),
                "x".into()
            ])
        );
        let err = |s: &str| check_field_selector(s).unwrap_err().to_string();
        assert_eq!(
            err("metadata.name"),
            "\"metadata.name\" has no `=`, `==` or `!=`"
        );
        assert_eq!(err("=x"), "\"=x\" names no field");
        assert_eq!(
            err("a=b=c"),
            "the value of \"a=b=c\" holds an unescaped '=' (write it as `\\=`)"
        );
        assert_eq!(
            err("a=b\\n"),
            "the value of \"a=b\\\\n\" holds the escape `\\n`; only `\\\\`, `\\,` and `\\=` are escapes"
        );
    }
}
