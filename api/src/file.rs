//! Files in a lease's scratch: what an upload answers and what a directory lists.
//!
//! `PUT /v1/leases/{id}/files/{path}` stores the body at `path` (relative to the lease's
//! scratch) and answers [`FileWritten`]; `GET` of a file streams its bytes, `GET` of a
//! directory answers a [`FileList`].

use serde::{Deserialize, Serialize};

/// `PUT /v1/leases/{id}/files/{path}` answer (201): the file as it now is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileWritten {
    /// The path written, relative to the lease's scratch, as the node normalised it.
    pub path: String,
    /// Bytes stored.
    pub bytes: u64,
}

/// What kind of thing a directory entry is. Anything else (symlinks a job made, sockets)
/// is listed as `other` and can be neither read nor written through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink, socket, FIFO or device node.
    Other,
}

/// One entry of a [`FileList`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// The entry's name (one path component).
    pub name: String,
    /// File, directory or other.
    pub kind: FileKind,
    /// Size in bytes (0 for directories and others).
    pub bytes: u64,
}

/// `GET /v1/leases/{id}/files/{path}` answer when `path` is a directory (`Content-Type:
/// application/json`), entries sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileList {
    /// The directory's entries.
    pub entries: Vec<FileEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_lower_case_words() {
        let l = FileList {
            entries: vec![FileEntry {
                name: "a".into(),
                kind: FileKind::Dir,
                bytes: 0,
            }],
        };
        let text = serde_json::to_string(&l).unwrap();
        assert_eq!(text, r#"{"entries":[{"name":"a","kind":"dir","bytes":0}]}"#);
        assert_eq!(serde_json::from_str::<FileList>(&text).unwrap(), l);
    }
}
