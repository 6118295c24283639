//! The string syntax of label selectors (`"app=x,tier in (a,b),!legacy"`), read as
//! apimachinery's `labels.Parse` reads it, and the requirements it is made of, with the key
//! and value rules the API server applies.

use super::super::quoted;

/// What a requirement asks of a label. `=` and `==` are `In` with one value, `!=` `NotIn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Requirement {
    pub(super) key: String,
    pub(super) op: Op,
    /// Sorted, without repeats.
    pub(super) values: Vec<String>,
}

impl Requirement {
    pub(super) fn new(key: &str, op: Op, values: Vec<String>) -> Result<Self, String> {
        check_key(key)?;
        match op {
            Op::In | Op::NotIn if values.is_empty() => {
                return Err(format!("{key}: in and notin need at least one value"));
            }
            Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                return Err(format!("{key}: Exists and DoesNotExist take no values"));
            }
            Op::Gt | Op::Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                return Err(format!("{key}: > and < compare with one whole number"));
            }
            _ => {}
        }
        for v in &values {
            check_value(v)?;
        }
        let mut values = values;
        values.sort();
        values.dedup();
        Ok(Self {
            key: key.to_string(),
            op,
            values,
        })
    }

    pub(super) fn matches(&self, value: Option<&str>) -> bool {
        let number = || value.and_then(|v| v.parse::<i64>().ok());
        let bound = || self.values.first().and_then(|v| v.parse::<i64>().ok());
        match self.op {
            Op::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotIn => !value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt => number().zip(bound()).is_some_and(|(n, b)| n > b),
            Op::Lt => number().zip(bound()).is_some_and(|(n, b)| n < b),
        }
    }

    /// The requirement in the string syntax.
    pub(super) fn written(&self) -> String {
        let key = &self.key;
        match self.op {
            Op::In if self.values.len() == 1 => format!("{key}={}", self.values[0]),
            Op::In => format!("{key} in ({})", self.values.join(",")),
            Op::NotIn if self.values.len() == 1 => format!("{key}!={}", self.values[0]),
            Op::NotIn => format!("{key} notin ({})", self.values.join(",")),
            Op::Exists => key.clone(),
            Op::DoesNotExist => format!("!{key}"),
            Op::Gt => format!("{key}>{}", self.values[0]),
            Op::Lt => format!("{key}<{}", self.values[0]),
        }
    }
}

/// A label name: at most 63 characters, alphanumeric at both ends, `-`, `_`, `.` inside.
fn is_name(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(ok)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS subdomain: at most 253 characters, dot-separated lowercase labels.
fn is_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A label key: a name, optionally prefixed by a DNS subdomain and `/`.
fn check_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => is_subdomain(prefix) && is_name(name),
        None => is_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a label key (a name of at most 63 letters, digits, '-', '_', '.', \
             optionally prefixed by a DNS subdomain and '/')",
            quoted(key)
        ))
    }
}

/// A label value: empty, or a name of at most 63 characters.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(format!(
            "{} is not a label value (at most 63 letters, digits, '-', '_', '.', \
             alphanumeric at both ends)",
            quoted(value)
        ))
    }
}

/// A token of the string syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Not,
    Eq,
    NotEq,
    In,
    NotIn,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Word(w) => format!("{w:?}"),
            Token::Not => "'!'".into(),
            Token::Eq => "'='".into(),
            Token::NotEq => "'!='".into(),
            Token::In => "'in'".into(),
            Token::NotIn => "'notin'".into(),
            Token::Gt => "'>'".into(),
            Token::Lt => "'<'".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Comma => "','".into(),
            Token::End => "the end".into(),
        }
    }
}

/// Splits a selector into tokens, as apimachinery's lexer does: words run until a blank or
/// one of `! = ( ) , < >`; `in` and `notin` are words only where an operator is expected
/// (the parser decides).
fn tokens(s: &str) -> Vec<Token> {
    let special = |c: char| c.is_whitespace() || "!=(),<>".contains(c);
    let mut out = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let two = |next: char, chars: &mut std::iter::Peekable<std::str::CharIndices>| {
            chars.next_if(|(_, n)| *n == next).is_some()
        };
        match c {
            c if c.is_whitespace() => {}
            '!' if two('=', &mut chars) => out.push(Token::NotEq),
            '!' => out.push(Token::Not),
            '=' => {
                two('=', &mut chars);
                out.push(Token::Eq);
            }
            '(' => out.push(Token::Open),
            ')' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            '>' => out.push(Token::Gt),
            '<' => out.push(Token::Lt),
            _ => {
                let mut end = i + c.len_utf8();
                while let Some((j, n)) = chars.next_if(|(_, n)| !special(*n)) {
                    end = j + n.len_utf8();
                }
                out.push(match &s[i..end] {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    w => Token::Word(w.to_string()),
                });
            }
        }
    }
    out.push(Token::End);
    out
}

/// Parses the string syntax; the error says what was found where something else was expected.
pub(super) fn parse(s: &str) -> Result<Vec<Requirement>, String> {
    let toks = tokens(s);
    let mut at = 0;
    let mut next = || {
        let t = toks.get(at).cloned().unwrap_or(Token::End);
        at += 1;
        t
    };
    let mut out = Vec::new();
    let mut tok = next();
    if tok == Token::End {
        return Ok(out);
    }
    loop {
        let negated = tok == Token::Not;
        if negated {
            tok = next();
        }
        // `in` and `notin` are keys too when they stand where a key does.
        let key = match tok {
            Token::Word(w) => w,
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            other => return Err(format!("found {}, expected a label key", other.describe())),
        };
        tok = next();
        if negated {
            out.push(Requirement::new(&key, Op::DoesNotExist, Vec::new())?);
        } else {
            let single = |tok: &mut Token, next: &mut dyn FnMut() -> Token| match next() {
                Token::Word(w) => {
                    *tok = next();
                    vec![w]
                }
                // `key=` is the empty value.
                t => {
                    *tok = t;
                    vec![String::new()]
                }
            };
            let (op, values) = match tok.clone() {
                Token::Comma | Token::End => (Op::Exists, Vec::new()),
                Token::Eq => (Op::In, single(&mut tok, &mut next)),
                Token::NotEq => (Op::NotIn, single(&mut tok, &mut next)),
                Token::Gt => (Op::Gt, single(&mut tok, &mut next)),
                Token::Lt => (Op::Lt, single(&mut tok, &mut next)),
                t @ (Token::In | Token::NotIn) => {
                    let op = if t == Token::In { Op::In } else { Op::NotIn };
                    let open = next();
                    if open != Token::Open {
                        return Err(format!(
                            "found {}, expected '(' after {key}'s operator",
                            open.describe()
                        ));
                    }
                    let mut values = Vec::new();
                    let mut value = String::new();
                    loop {
                        match next() {
                            Token::Word(w) if value.is_empty() => value = w,
                            Token::Comma => values.push(std::mem::take(&mut value)),
                            Token::Close => {
                                if !value.is_empty() || !values.is_empty() {
                                    values.push(std::mem::take(&mut value));
                                }
                                break;
                            }
                            other => {
                                return Err(format!(
                                    "found {} in the values of {key}, expected a value, ',' or ')'",
                                    other.describe()
                                ));
                            }
                        }
                    }
                    tok = next();
                    (op, values)
                }
                other => {
                    return Err(format!(
                        "found {} after {key}, expected =, ==, !=, in, notin, >, <, ',' or the end",
                        other.describe()
                    ));
                }
            };
            out.push(Requirement::new(&key, op, values)?);
        }
        match tok {
            Token::End => return Ok(out),
            Token::Comma => tok = next(),
            other => {
                return Err(format!(
                    "found {} after a requirement, expected ',' or the end",
                    other.describe()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_and_notin_are_keys_where_a_key_stands() {
        assert_eq!(parse("in=a").unwrap()[0].key, "in");
        assert_eq!(parse("!notin").unwrap()[0].op, Op::DoesNotExist);
    }

    #[test]
    fn requirements_are_checked_and_kept_sorted() {
        let r = &parse("tier in (b,a,b)").unwrap()[0];
        assert_eq!(r.values, ["a", "b"]);
        assert_eq!(r.written(), "tier in (a,b)");
        assert!(r.matches(Some("a")) && !r.matches(None));
        assert!(parse(&format!("{}=x", "k".repeat(64))).is_err());
        assert!(parse(&format!("a/{}=x", "k".repeat(63))).is_ok());
    }
}
