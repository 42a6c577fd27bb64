//! Text or base64: how file bytes travel in tool arguments and results.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::error::FileError;

/// How content is carried in a tool argument or result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// UTF-8 text; refused for bytes that are not valid UTF-8.
    #[default]
    Utf8,
    /// Standard base64 with padding; works for any bytes.
    Base64,
}

/// Encodes bytes read from `path` (sandbox view, for the error message).
pub fn encode(path: &str, data: &[u8], encoding: Encoding) -> Result<String, FileError> {
    match encoding {
        Encoding::Utf8 => {
            std::str::from_utf8(data)
                .map(str::to_owned)
                .map_err(|_| FileError::NotUtf8 {
                    path: path.to_owned(),
                })
        }
        Encoding::Base64 => Ok(STANDARD.encode(data)),
    }
}

/// Decodes content given for `path` (sandbox view, for the error message).
pub fn decode(path: &str, content: &str, encoding: Encoding) -> Result<Vec<u8>, FileError> {
    match encoding {
        Encoding::Utf8 => Ok(content.as_bytes().to_vec()),
        Encoding::Base64 => STANDARD
            .decode(content)
            .map_err(|e| FileError::InvalidRequest {
                path: path.to_owned(),
                reason: format!("content is not valid base64 ({e}); send standard padded base64"),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_or_tell_to_use_base64() {
        assert_eq!(encode("/workspace/a", b"hi", Encoding::Utf8).unwrap(), "hi");
        let e = encode("/workspace/a", b"\xff", Encoding::Utf8).unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
        assert_eq!(
            encode("/workspace/a", b"\xff", Encoding::Base64).unwrap(),
            "/w=="
        );
        assert_eq!(decode("a", "/w==", Encoding::Base64).unwrap(), b"\xff");
        assert!(decode("a", "!!", Encoding::Base64).is_err());
    }
}
