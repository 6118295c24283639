//! Durations as authors write them: `"250ms"`, `"30s"`, `"5m"`, `"1h"`, or bare seconds.
//!
//! [`Duration`] is the config's type for them: parsed once when the config is read (a bad value
//! is an error at its line), and a plain `std::time::Duration` everywhere after.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration as StdDuration;

/// A duration in a config file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(StdDuration);

impl Duration {
    pub const fn from_secs(secs: u64) -> Self {
        Self(StdDuration::from_secs(secs))
    }

    pub const fn get(self) -> StdDuration {
        self.0
    }
}

impl From<Duration> for StdDuration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

impl std::str::FromStr for Duration {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        parse(s).map(Self)
    }
}

impl std::fmt::Display for Duration {
    /// The shortest of `"250ms"`, `"30s"`, `"5m"`, `"2h"` that says it exactly.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            _ if ms.is_multiple_of(3_600_000) && ms > 0 => write!(f, "{}h", ms / 3_600_000),
            _ if ms.is_multiple_of(60_000) && ms > 0 => write!(f, "{}m", ms / 60_000),
            _ if ms.is_multiple_of(1000) => write!(f, "{}s", ms / 1000),
            _ => write!(f, "{ms}ms"),
        }
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Seconds(f64),
        }
        match Written::deserialize(d)? {
            Written::Text(s) => parse(&s).map(Self).map_err(serde::de::Error::custom),
            Written::Seconds(n) if n >= 0.0 && n.is_finite() => {
                StdDuration::try_from_secs_f64(n).map(Self).map_err(|_| {
                    serde::de::Error::custom(format!("{n} seconds is too long to wait for"))
                })
            }
            Written::Seconds(n) => Err(serde::de::Error::custom(format!(
                "expected a duration like \"30s\", got {n}"
            ))),
        }
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a written duration is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("expected a duration like \"30s\", got {0:?}")]
    NotADuration(String),
    #[error("unknown unit {unit:?} in {text:?}; use ms, s, m or h")]
    UnknownUnit { unit: String, text: String },
    #[error("{0:?} is too long to wait for")]
    TooLong(String),
}

/// Parses `"250ms"`, `"30s"`, `"5m"`, `"1h"` or a plain number of seconds.
pub(crate) fn parse(s: &str) -> Result<StdDuration, ParseError> {
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| ParseError::NotADuration(s.into()))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(ParseError::UnknownUnit {
                unit: unit.into(),
                text: s.into(),
            });
        }
    };
    StdDuration::try_from_secs_f64(secs).map_err(|_| ParseError::TooLong(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_authors_write_are_understood() {
        assert_eq!(parse("250ms").unwrap(), StdDuration::from_millis(250));
        assert_eq!(parse("1.5s").unwrap(), StdDuration::from_millis(1500));
        assert_eq!(parse("5m").unwrap(), StdDuration::from_secs(300));
        assert_eq!(parse("2h").unwrap(), StdDuration::from_secs(7200));
        assert_eq!(parse("7").unwrap(), StdDuration::from_secs(7));
        assert_eq!(
            parse("5 parsecs").unwrap_err().to_string(),
            "unknown unit \" parsecs\" in \"5 parsecs\"; use ms, s, m or h"
        );
    }

    #[test]
    fn a_config_duration_reads_text_or_seconds_and_writes_back_the_shortest_text() {
        let d: Duration = serde_json::from_value(serde_json::json!("90s")).unwrap();
        assert_eq!(d.get(), StdDuration::from_secs(90));
        assert_eq!(d.to_string(), "90s");
        let d: Duration = serde_json::from_value(serde_json::json!(300)).unwrap();
        assert_eq!(d.to_string(), "5m");
        let d: Duration = serde_json::from_value(serde_json::json!("250ms")).unwrap();
        assert_eq!(serde_json::to_value(d).unwrap(), "250ms");
        let err = serde_json::from_value::<Duration>(serde_json::json!("soon")).unwrap_err();
        assert!(
            err.to_string().contains("expected a duration like"),
            "{err}"
        );
        assert!(serde_json::from_value::<Duration>(serde_json::json!(-1)).is_err());
    }

    #[test]
    fn a_duration_too_long_to_represent_is_an_error_not_a_panic() {
        // Found by fuzzing (`scripts/fuzz plan`): a script answering
        // `requeue_after: "377777777777777777777777730s"` panicked in Duration::from_secs_f64.
        let long = "377777777777777777777777730s";
        assert_eq!(
            parse(long).unwrap_err().to_string(),
            format!("{long:?} is too long to wait for")
        );
        assert!(parse("99999999999999999999h").is_err());
        assert!(parse("9999999999").is_ok());
    }
}
