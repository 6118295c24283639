//! `base64::`: text to base64 and back, in the standard alphabet (Secret `data`, padded) or
//! the URL-safe one (tokens and names, unpadded). Decoding accepts padding or its absence.

use ::base64::alphabet;
use ::base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// The standard alphabet, written padded.
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
/// The URL-safe alphabet, written unpadded (as JWTs and RFC 7515 write it).
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// `text` decoded with `engine`, as UTF-8 text.
fn decode(function: &str, engine: &GeneralPurpose, text: &str) -> Result<String, String> {
    use ::base64::Engine;
    let bytes = engine
        .decode(text.trim())
        .map_err(|e| format!("{function}: {} is not base64: {e}", super::quoted(text)))?;
    String::from_utf8(bytes)
        .map_err(|_| format!("{function}: the decoded bytes are not UTF-8 text"))
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::super::{RhaiResult, error};
    use super::{STANDARD, URL_SAFE};
    use ::base64::Engine;
    use rhai::NativeCallContext;

    /// `text`'s UTF-8 bytes in standard base64, padded.
    pub fn encode(text: &str) -> String {
        STANDARD.encode(text)
    }

    /// Standard base64 (padded or not) decoded to text; an error when the bytes are not UTF-8.
    #[rhai_fn(return_raw)]
    pub fn decode(ctx: NativeCallContext, text: &str) -> RhaiResult<String> {
        super::decode("base64::decode", &STANDARD, text).map_err(|m| error(&ctx, m))
    }

    /// `text`'s UTF-8 bytes in URL-safe base64, unpadded.
    pub fn encode_url(text: &str) -> String {
        URL_SAFE.encode(text)
    }

    /// URL-safe base64 (padded or not) decoded to text.
    #[rhai_fn(return_raw)]
    pub fn decode_url(ctx: NativeCallContext, text: &str) -> RhaiResult<String> {
        super::decode("base64::decode_url", &URL_SAFE, text).map_err(|m| error(&ctx, m))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::{Limits, engine};

    fn eval(src: &str) -> Result<String, String> {
        engine(&Limits::default())
            .eval::<String>(src)
            .map_err(|e| e.to_string().replacen("Runtime error: ", "", 1))
    }

    #[test]
    fn both_alphabets_round_trip_text() {
        assert_eq!(eval(r#"base64::encode("hi?>")"#).unwrap(), "aGk/Pg==");
        assert_eq!(eval(r#"base64::encode_url("hi?>")"#).unwrap(), "aGk_Pg");
        assert_eq!(eval(r#"base64::decode("aGk/Pg==")"#).unwrap(), "hi?>");
        assert_eq!(eval(r#"base64::decode("aGk/Pg")"#).unwrap(), "hi?>");
        assert_eq!(eval(r#"base64::decode_url("aGk_Pg==")"#).unwrap(), "hi?>");
        assert_eq!(
            eval(r#"base64::decode(base64::encode("ünïcödé ✓"))"#).unwrap(),
            "ünïcödé ✓"
        );
        assert_eq!(eval(r#"base64::encode("")"#).unwrap(), "");
    }

    #[test]
    fn text_that_is_not_base64_or_not_utf8_is_an_error() {
        let err = eval(r#"base64::decode("a_b")"#).unwrap_err();
        assert!(
            err.starts_with("base64::decode: \"a_b\" is not base64: Invalid symbol 95"),
            "{err}"
        );
        let err = eval(r#"base64::decode_url("aGk/Pg")"#).unwrap_err();
        assert!(
            err.starts_with("base64::decode_url: \"aGk/Pg\" is not base64"),
            "{err}"
        );
        // 0xff 0xfe is no UTF-8.
        let err = eval(r#"base64::decode("//4=")"#).unwrap_err();
        assert!(
            err.starts_with("base64::decode: the decoded bytes are not UTF-8 text"),
            "{err}"
        );
    }
}
