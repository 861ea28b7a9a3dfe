//! The export layout, defined once: file names inside an export directory, and the text
//! format of a consistency proof between two checkpoints.

use attest::log::Hash;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// The signed checkpoint note, verbatim.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// The log's verifier key, one line.
pub const VKEY_FILE: &str = "log.vkey";
/// The records: line `i` is the exact bytes of leaf `i`, `\n` after each.
pub const RECORDS_FILE: &str = "records.jsonl";
/// Directory of the optional receipts, `<id>.tlog-proof`.
pub const RECEIPTS_DIR: &str = "receipts";
/// Extension of a receipt file.
pub const RECEIPT_EXT: &str = "tlog-proof";

/// First line of a consistency proof file.
pub const CONSISTENCY_HEADER: &str = "sovereign-host/consistency-proof@v1";

/// At most this many hashes in a consistency proof (enough for any 64-bit tree size).
pub const MAX_PROOF_HASHES: usize = 64;

/// The name of the receipt of record `id` inside an export, e.g. `receipts/12.tlog-proof`.
pub fn receipt_path(id: u64) -> String {
    format!("{RECEIPTS_DIR}/{id}.{RECEIPT_EXT}")
}

/// The record id a receipt file name (`<id>.tlog-proof`, without the directory) names.
pub fn receipt_id(file_name: &str) -> Option<u64> {
    file_name
        .strip_suffix(RECEIPT_EXT)
        .and_then(|n| n.strip_suffix('.'))
        .and_then(parse_decimal)
}

/// An RFC 9162 consistency proof between two sizes of the log, as a text file:
///
/// ```text
/// sovereign-host/consistency-proof@v1
/// old <size1>
/// new <size2>
/// <base64 hash>        (zero or more, in RFC 9162 order)
/// ```
///
/// every line ending in `\n`. The sizes are in the file so that a proof meant for other
/// checkpoints is refused with a precise message rather than a failed hash comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistencyProof {
    /// Tree size of the earlier checkpoint (the `old` line).
    pub old_size: u64,
    /// Tree size of the later checkpoint (the `new` line), at least `old_size`.
    pub new_size: u64,
    /// The RFC 9162 §2.1.4 proof hashes, in order; empty when the sizes are equal or the old
    /// size is 0. At most [`MAX_PROOF_HASHES`].
    pub hashes: Vec<Hash>,
}

/// Why a consistency proof file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofParseError {
    /// The text does not end with `\n` (a cut file, or not a proof file).
    #[error("consistency proof must end with a newline")]
    MissingNewline,
    /// The first line is not [`CONSISTENCY_HEADER`]: another format or version.
    #[error("consistency proof must start with the line {CONSISTENCY_HEADER:?}")]
    MissingHeader,
    /// The `old` or `new` line (named by `label`) is missing or not a plain decimal.
    #[error("consistency proof has no valid `{label} <decimal size>` line")]
    InvalidSize {
        /// `old` or `new`.
        label: &'static str,
    },
    /// More than [`MAX_PROOF_HASHES`] hash lines: more than any proof between 64-bit sizes
    /// needs.
    #[error("consistency proof has more than {MAX_PROOF_HASHES} hashes")]
    TooManyHashes,
    /// Hash number `number` (counting from 1) is not the standard base64 of 32 bytes.
    #[error("consistency proof hash #{number} is not the standard base64 of 32 bytes")]
    InvalidHash {
        /// Position of the bad hash line among the hashes, counting from 1.
        number: usize,
    },
}

impl ConsistencyProof {
    /// The file text.
    pub fn format(&self) -> String {
        let mut s = format!(
            "{CONSISTENCY_HEADER}\nold {}\nnew {}\n",
            self.old_size, self.new_size
        );
        for h in &self.hashes {
            s.push_str(&B64.encode(h));
            s.push('\n');
        }
        s
    }

    /// Parses the file text, strictly (no leading zeros, no blank lines, no extra lines).
    pub fn parse(text: &str) -> Result<Self, ProofParseError> {
        let body = text
            .strip_suffix('\n')
            .ok_or(ProofParseError::MissingNewline)?;
        let mut lines = body.split('\n');
        if lines.next() != Some(CONSISTENCY_HEADER) {
            return Err(ProofParseError::MissingHeader);
        }
        let mut size = |label: &'static str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(label))
                .and_then(|l| l.strip_prefix(' '))
                .and_then(parse_decimal)
                .ok_or(ProofParseError::InvalidSize { label })
        };
        let old_size = size("old")?;
        let new_size = size("new")?;
        let mut hashes = Vec::new();
        for (i, line) in lines.enumerate() {
            if hashes.len() == MAX_PROOF_HASHES {
                return Err(ProofParseError::TooManyHashes);
            }
            let h = B64
                .decode(line)
                .ok()
                .and_then(|h| Hash::try_from(h.as_slice()).ok())
                .ok_or(ProofParseError::InvalidHash { number: i + 1 })?;
            hashes.push(h);
        }
        Ok(Self {
            old_size,
            new_size,
            hashes,
        })
    }
}

/// A decimal without sign or leading zeros that fits in 64 bits.
pub(crate) fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consistency_proof_files_round_trip_and_reject_garbage() {
        let p = ConsistencyProof {
            old_size: 3,
            new_size: 8,
            hashes: vec![[1; 32], [2; 32]],
        };
        let text = p.format();
        assert!(text.starts_with("sovereign-host/consistency-proof@v1\nold 3\nnew 8\n"));
        assert_eq!(ConsistencyProof::parse(&text).unwrap(), p);
        let e = |t: &str| ConsistencyProof::parse(t).unwrap_err();
        assert_eq!(e(text.trim_end()), ProofParseError::MissingNewline);
        assert_eq!(
            e(&text.replace("old 3", "old 03")),
            ProofParseError::InvalidSize { label: "old" }
        );
        assert_eq!(
            e(&text.replace("new 8\n", "new 8\nAAAA\n")),
            ProofParseError::InvalidHash { number: 1 }
        );
        assert_eq!(e("garbage\n"), ProofParseError::MissingHeader);
        let long = ConsistencyProof {
            hashes: vec![[0; 32]; 65],
            ..p
        };
        assert_eq!(e(&long.format()), ProofParseError::TooManyHashes);
        assert_eq!(
            e("garbage\n").to_string(),
            "consistency proof must start with the line \"sovereign-host/consistency-proof@v1\""
        );
        assert_eq!(
            ProofParseError::InvalidSize { label: "new" }.to_string(),
            "consistency proof has no valid `new <decimal size>` line"
        );
    }

    #[test]
    fn receipt_names() {
        assert_eq!(receipt_path(12), "receipts/12.tlog-proof");
        assert_eq!(receipt_id("12.tlog-proof"), Some(12));
        assert_eq!(receipt_id("012.tlog-proof"), None);
        assert_eq!(receipt_id("12tlog-proof"), None);
        assert_eq!(receipt_id("x.tlog-proof"), None);
    }
}
