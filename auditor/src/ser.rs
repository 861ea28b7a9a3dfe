//! Serde helpers: hashes as standard base64, errors as their message.

use attest::log::Hash;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Serializer;
use std::fmt::Display;

/// Standard base64 of a hash, as checkpoints print it.
pub(crate) fn b64(hash: &Hash) -> String {
    B64.encode(hash)
}

pub(crate) fn hash<S: Serializer>(hash: &Hash, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&b64(hash))
}

pub(crate) fn display<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// A checkpoint as JSON: origin, size, base64 root, extensions.
pub(crate) fn checkpoint<S: Serializer>(
    c: &attest::checkpoint::Checkpoint,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct as _;
    let mut st = s.serialize_struct("Checkpoint", 4)?;
    st.serialize_field("origin", &c.origin)?;
    st.serialize_field("size", &c.size)?;
    st.serialize_field("root", &b64(&c.root))?;
    st.serialize_field("extensions", &c.extensions)?;
    st.end()
}
