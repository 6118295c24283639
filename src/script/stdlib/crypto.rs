//! `crypto::`: digests of text, written as lowercase hex (what annotations and names can hold).

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    /// The SHA-256 digest of `text`'s UTF-8 bytes, as 64 lowercase hex digits.
    pub fn sha256(text: &str) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::{Limits, engine};

    #[test]
    fn sha256_matches_the_standard_test_vectors() {
        let e = engine(&Limits::default());
        let digest = |s: &str| e.eval::<String>(&format!("crypto::sha256({s:?})")).unwrap();
        assert_eq!(
            digest(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            digest("ünï"),
            super::api::sha256("ünï"),
            "UTF-8 bytes are hashed"
        );
        let err = e
            .eval::<String>("crypto::sha256(42)")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Function not found: crypto::sha256 (i64)"),
            "{err}"
        );
    }
}
