//! Durations as authors write them: `"250ms"`, `"30s"`, `"5m"`, `"1h"`, or bare seconds.

use std::time::Duration;

/// Parses `"250ms"`, `"30s"`, `"5m"`, `"1h"` or a plain number of seconds.
pub fn parse(s: &str) -> Result<Duration, String> {
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like \"30s\", got {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {s:?}; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long to wait for"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_authors_write_are_understood() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse("7").unwrap(), Duration::from_secs(7));
        assert_eq!(
            parse("5 parsecs").unwrap_err(),
            "unknown unit \" parsecs\" in \"5 parsecs\"; use ms, s, m or h"
        );
    }

    #[test]
    fn a_duration_too_long_to_represent_is_an_error_not_a_panic() {
        // Found by fuzzing (`scripts/fuzz plan`): a script answering
        // `requeue_after: "377777777777777777777777730s"` panicked in Duration::from_secs_f64.
        let long = "377777777777777777777777730s";
        assert_eq!(
            parse(long).unwrap_err(),
            format!("{long:?} is too long to wait for")
        );
        assert!(parse("99999999999999999999h").is_err());
        assert!(parse("9999999999").is_ok());
    }
}
