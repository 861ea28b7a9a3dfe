//! Canonical JSON: the byte encoding every signed attestation object uses.
//!
//! Signatures must cover bytes that an outsider can rebuild from the parsed object, in any
//! language, without this crate. We therefore use a strict subset of RFC 8785 (JSON
//! Canonicalization Scheme) that needs no floating-point formatting:
//!
//! * values are objects, arrays, strings, integers, `true`, `false` and `null`;
//!   numbers must be integers in `-(2^53-1) ..= 2^53-1` (floats are rejected);
//! * object members are sorted by their keys compared as UTF-16 code units (RFC 8785 §3.2.3);
//!   duplicate keys are rejected;
//! * no whitespace anywhere;
//! * strings escape `"` and `\` as `\"` `\\`, the controls U+0008, U+0009, U+000A, U+000C,
//!   U+000D as `\b \t \n \f \r`, every other control below U+0020 as `\u00xx` (lowercase hex),
//!   and everything else is written as literal UTF-8.
//!
//! Decoding is strict too: [`decode`] accepts bytes only if re-encoding the parsed value gives
//! back exactly the same bytes, so each document has one and only one accepted encoding and the
//! evidence digest (SHA-256 of those bytes) is unambiguous.
//!
//! Signed messages are domain-separated: `context || 0x00 || canonical bytes`, where `context`
//! is an ASCII string naming the object type and version (see [`signing_input`]).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Largest integer magnitude allowed, so every number survives an IEEE-754 double round trip
/// (as in RFC 8785 / I-JSON).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value or byte string is not canonical JSON.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    /// The bytes are not JSON at all (or nest too deeply).
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// A floating-point or out-of-range number was found.
    #[error("number {0} is not an integer in the safe range ±(2^53-1)")]
    Number(String),
    /// The JSON parses but is not written in canonical form (whitespace, key order,
    /// escaping, duplicate keys).
    #[error("JSON is not in canonical form")]
    NotCanonical,
    /// The value does not have the expected shape.
    #[error("unexpected structure: {0}")]
    Shape(String),
}

/// Encode a JSON value canonically.
pub fn encode_value(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out)?;
    Ok(out)
}

/// Serialize any `Serialize` type to canonical bytes.
///
/// Writes directly through a serde serializer (no intermediate `serde_json::Value`); the result
/// is identical to [`encode_value`] of the value's JSON form.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(512);
    value.serialize(ser::Canon { out: &mut out })?;
    Ok(out)
}

/// Parse bytes that must already be canonical; returns the generic value.
pub fn decode_value(bytes: &[u8]) -> Result<Value, CanonicalError> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| CanonicalError::Syntax(e.to_string()))?;
    let again = encode_value(&v)?;
    if again != bytes {
        return Err(CanonicalError::NotCanonical);
    }
    Ok(v)
}

/// Parse canonical bytes into a typed value.
///
/// The typed value is encoded again and must reproduce the input byte for byte, so optional
/// fields, maps and hex spellings each have exactly one accepted form.
pub fn decode<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, CanonicalError> {
    let typed: T = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            CanonicalError::Syntax(e.to_string())
        } else {
            CanonicalError::Shape(e.to_string())
        }
    })?;
    if encode(&typed)? != bytes {
        return Err(CanonicalError::NotCanonical);
    }
    Ok(typed)
}

/// The exact message a signature covers: `context || 0x00 || canonical`.
pub fn signing_input(context: &str, canonical: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(context.len() + 1 + canonical.len());
    m.extend_from_slice(context.as_bytes());
    m.push(0);
    m.extend_from_slice(canonical);
    m
}

fn write_value(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                if u > MAX_SAFE_INTEGER {
                    return Err(CanonicalError::Number(n.to_string()));
                }
                out.extend_from_slice(u.to_string().as_bytes());
            } else if let Some(i) = n.as_i64() {
                if i.unsigned_abs() > MAX_SAFE_INTEGER {
                    return Err(CanonicalError::Number(n.to_string()));
                }
                out.extend_from_slice(i.to_string().as_bytes());
            } else {
                return Err(CanonicalError::Number(n.to_string()));
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                // The key came from the map, so the lookup cannot miss.
                if let Some(v) = map.get(k.as_str()) {
                    write_value(v, out)?;
                }
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// A serde serializer emitting canonical JSON directly.
mod ser {
    use super::{write_string, CanonicalError, MAX_SAFE_INTEGER};
    use serde::ser::{self, Serialize};
    use std::borrow::Cow;

    impl ser::Error for CanonicalError {
        fn custom<T: std::fmt::Display>(msg: T) -> Self {
            CanonicalError::Shape(msg.to_string())
        }
    }

    pub(super) struct Canon<'a> {
        pub(super) out: &'a mut Vec<u8>,
    }

    fn int(out: &mut Vec<u8>, neg: bool, mag: u64) -> Result<(), CanonicalError> {
        if mag > MAX_SAFE_INTEGER {
            let sign = if neg { "-" } else { "" };
            return Err(CanonicalError::Number(format!("{sign}{mag}")));
        }
        if neg && mag != 0 {
            out.push(b'-');
        }
        out.extend_from_slice(mag.to_string().as_bytes());
        Ok(())
    }

    /// Members of an object: values are written to a scratch buffer, then emitted sorted by
    /// key (UTF-16 code units).
    pub(super) struct Obj<'a> {
        out: &'a mut Vec<u8>,
        scratch: Vec<u8>,
        members: Vec<(Cow<'static, str>, usize, usize)>,
        pending_key: Option<String>,
        /// Wrapping `{"variant":` written for enum variants; needs a closing brace.
        close_variant: bool,
    }

    impl<'a> Obj<'a> {
        fn new(out: &'a mut Vec<u8>, close_variant: bool) -> Self {
            Self {
                out,
                scratch: Vec::new(),
                members: Vec::new(),
                pending_key: None,
                close_variant,
            }
        }

        fn member<T: Serialize + ?Sized>(
            &mut self,
            key: Cow<'static, str>,
            value: &T,
        ) -> Result<(), CanonicalError> {
            let start = self.scratch.len();
            value.serialize(Canon {
                out: &mut self.scratch,
            })?;
            self.members.push((key, start, self.scratch.len()));
            Ok(())
        }

        fn finish(mut self) -> Result<(), CanonicalError> {
            self.members
                .sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            if self.members.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(CanonicalError::Shape("duplicate object key".into()));
            }
            self.out.push(b'{');
            for (i, (k, start, end)) in self.members.iter().enumerate() {
                if i > 0 {
                    self.out.push(b',');
                }
                write_string(k, self.out);
                self.out.push(b':');
                self.out.extend_from_slice(&self.scratch[*start..*end]);
            }
            self.out.push(b'}');
            if self.close_variant {
                self.out.push(b'}');
            }
            Ok(())
        }
    }

    pub(super) struct Arr<'a> {
        out: &'a mut Vec<u8>,
        first: bool,
        close_variant: bool,
    }

    impl Arr<'_> {
        fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonicalError> {
            if !self.first {
                self.out.push(b',');
            }
            self.first = false;
            value.serialize(Canon {
                out: &mut *self.out,
            })
        }

        fn finish(self) -> Result<(), CanonicalError> {
            self.out.push(b']');
            if self.close_variant {
                self.out.push(b'}');
            }
            Ok(())
        }
    }

    fn open_variant(out: &mut Vec<u8>, variant: &str) {
        out.push(b'{');
        write_string(variant, out);
        out.push(b':');
    }

    impl<'a> ser::Serializer for Canon<'a> {
        type Ok = ();
        type Error = CanonicalError;
        type SerializeSeq = Arr<'a>;
        type SerializeTuple = Arr<'a>;
        type SerializeTupleStruct = Arr<'a>;
        type SerializeTupleVariant = Arr<'a>;
        type SerializeMap = Obj<'a>;
        type SerializeStruct = Obj<'a>;
        type SerializeStructVariant = Obj<'a>;

        fn serialize_bool(self, v: bool) -> Result<(), CanonicalError> {
            self.out
                .extend_from_slice(if v { b"true" } else { b"false" });
            Ok(())
        }
        fn serialize_i8(self, v: i8) -> Result<(), CanonicalError> {
            self.serialize_i64(v.into())
        }
        fn serialize_i16(self, v: i16) -> Result<(), CanonicalError> {
            self.serialize_i64(v.into())
        }
        fn serialize_i32(self, v: i32) -> Result<(), CanonicalError> {
            self.serialize_i64(v.into())
        }
        fn serialize_i64(self, v: i64) -> Result<(), CanonicalError> {
            int(self.out, v < 0, v.unsigned_abs())
        }
        fn serialize_u8(self, v: u8) -> Result<(), CanonicalError> {
            self.serialize_u64(v.into())
        }
        fn serialize_u16(self, v: u16) -> Result<(), CanonicalError> {
            self.serialize_u64(v.into())
        }
        fn serialize_u32(self, v: u32) -> Result<(), CanonicalError> {
            self.serialize_u64(v.into())
        }
        fn serialize_u64(self, v: u64) -> Result<(), CanonicalError> {
            int(self.out, false, v)
        }
        fn serialize_f32(self, v: f32) -> Result<(), CanonicalError> {
            Err(CanonicalError::Number(v.to_string()))
        }
        fn serialize_f64(self, v: f64) -> Result<(), CanonicalError> {
            Err(CanonicalError::Number(v.to_string()))
        }
        fn serialize_char(self, v: char) -> Result<(), CanonicalError> {
            let mut buf = [0u8; 4];
            write_string(v.encode_utf8(&mut buf), self.out);
            Ok(())
        }
        fn serialize_str(self, v: &str) -> Result<(), CanonicalError> {
            write_string(v, self.out);
            Ok(())
        }
        fn serialize_bytes(self, v: &[u8]) -> Result<(), CanonicalError> {
            // As serde_json does: an array of integers.
            let mut a = self.serialize_seq(Some(v.len()))?;
            for b in v {
                a.element(b)?;
            }
            a.finish()
        }
        fn serialize_none(self) -> Result<(), CanonicalError> {
            self.out.extend_from_slice(b"null");
            Ok(())
        }
        fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), CanonicalError> {
            value.serialize(self)
        }
        fn serialize_unit(self) -> Result<(), CanonicalError> {
            self.serialize_none()
        }
        fn serialize_unit_struct(self, _name: &'static str) -> Result<(), CanonicalError> {
            self.serialize_none()
        }
        fn serialize_unit_variant(
            self,
            _name: &'static str,
            _index: u32,
            variant: &'static str,
        ) -> Result<(), CanonicalError> {
            self.serialize_str(variant)
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            _name: &'static str,
            value: &T,
        ) -> Result<(), CanonicalError> {
            value.serialize(self)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _name: &'static str,
            _index: u32,
            variant: &'static str,
            value: &T,
        ) -> Result<(), CanonicalError> {
            open_variant(self.out, variant);
            value.serialize(Canon {
                out: &mut *self.out,
            })?;
            self.out.push(b'}');
            Ok(())
        }
        fn serialize_seq(self, _len: Option<usize>) -> Result<Arr<'a>, CanonicalError> {
            self.out.push(b'[');
            Ok(Arr {
                out: self.out,
                first: true,
                close_variant: false,
            })
        }
        fn serialize_tuple(self, len: usize) -> Result<Arr<'a>, CanonicalError> {
            self.serialize_seq(Some(len))
        }
        fn serialize_tuple_struct(
            self,
            _name: &'static str,
            len: usize,
        ) -> Result<Arr<'a>, CanonicalError> {
            self.serialize_seq(Some(len))
        }
        fn serialize_tuple_variant(
            self,
            _name: &'static str,
            _index: u32,
            variant: &'static str,
            _len: usize,
        ) -> Result<Arr<'a>, CanonicalError> {
            open_variant(self.out, variant);
            self.out.push(b'[');
            Ok(Arr {
                out: self.out,
                first: true,
                close_variant: true,
            })
        }
        fn serialize_map(self, _len: Option<usize>) -> Result<Obj<'a>, CanonicalError> {
            Ok(Obj::new(self.out, false))
        }
        fn serialize_struct(
            self,
            _name: &'static str,
            _len: usize,
        ) -> Result<Obj<'a>, CanonicalError> {
            Ok(Obj::new(self.out, false))
        }
        fn serialize_struct_variant(
            self,
            _name: &'static str,
            _index: u32,
            variant: &'static str,
            _len: usize,
        ) -> Result<Obj<'a>, CanonicalError> {
            open_variant(self.out, variant);
            Ok(Obj::new(self.out, true))
        }
    }

    impl ser::SerializeSeq for Arr<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_element<T: Serialize + ?Sized>(
            &mut self,
            v: &T,
        ) -> Result<(), CanonicalError> {
            self.element(v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    impl ser::SerializeTuple for Arr<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_element<T: Serialize + ?Sized>(
            &mut self,
            v: &T,
        ) -> Result<(), CanonicalError> {
            self.element(v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    impl ser::SerializeTupleStruct for Arr<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CanonicalError> {
            self.element(v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    impl ser::SerializeTupleVariant for Arr<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CanonicalError> {
            self.element(v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    impl ser::SerializeMap for Obj<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CanonicalError> {
            self.pending_key = Some(key.serialize(KeyCapture)?);
            Ok(())
        }
        fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CanonicalError> {
            let key = self
                .pending_key
                .take()
                .ok_or_else(|| CanonicalError::Shape("map value without key".into()))?;
            self.member(Cow::Owned(key), v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    impl ser::SerializeStruct for Obj<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_field<T: Serialize + ?Sized>(
            &mut self,
            key: &'static str,
            v: &T,
        ) -> Result<(), CanonicalError> {
            self.member(Cow::Borrowed(key), v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    impl ser::SerializeStructVariant for Obj<'_> {
        type Ok = ();
        type Error = CanonicalError;
        fn serialize_field<T: Serialize + ?Sized>(
            &mut self,
            key: &'static str,
            v: &T,
        ) -> Result<(), CanonicalError> {
            self.member(Cow::Borrowed(key), v)
        }
        fn end(self) -> Result<(), CanonicalError> {
            self.finish()
        }
    }

    /// Object keys must be strings (as in JSON); integers are not coerced.
    struct KeyCapture;

    fn not_a_string() -> CanonicalError {
        CanonicalError::Shape("object keys must be strings".into())
    }

    impl ser::Serializer for KeyCapture {
        type Ok = String;
        type Error = CanonicalError;
        type SerializeSeq = ser::Impossible<String, CanonicalError>;
        type SerializeTuple = ser::Impossible<String, CanonicalError>;
        type SerializeTupleStruct = ser::Impossible<String, CanonicalError>;
        type SerializeTupleVariant = ser::Impossible<String, CanonicalError>;
        type SerializeMap = ser::Impossible<String, CanonicalError>;
        type SerializeStruct = ser::Impossible<String, CanonicalError>;
        type SerializeStructVariant = ser::Impossible<String, CanonicalError>;

        fn serialize_str(self, v: &str) -> Result<String, CanonicalError> {
            Ok(v.to_string())
        }
        fn serialize_char(self, v: char) -> Result<String, CanonicalError> {
            Ok(v.to_string())
        }
        fn serialize_unit_variant(
            self,
            _name: &'static str,
            _index: u32,
            variant: &'static str,
        ) -> Result<String, CanonicalError> {
            Ok(variant.to_string())
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            _name: &'static str,
            value: &T,
        ) -> Result<String, CanonicalError> {
            value.serialize(self)
        }
        fn serialize_bool(self, _: bool) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_i8(self, _: i8) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_i16(self, _: i16) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_i32(self, _: i32) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_i64(self, _: i64) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_u8(self, _: u8) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_u16(self, _: u16) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_u32(self, _: u32) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_u64(self, _: u64) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_f32(self, _: f32) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_f64(self, _: f64) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_bytes(self, _: &[u8]) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_none(self) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_unit(self) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<String, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStruct, CanonicalError> {
            Err(not_a_string())
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, CanonicalError> {
            Err(not_a_string())
        }
    }
}

/// Serde helpers writing byte strings as lowercase hex and refusing any other spelling, so the
/// typed view and the canonical bytes never disagree.
pub mod hex_bytes {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    /// Why a string is not lowercase hex.
    #[derive(Debug, thiserror::Error, PartialEq)]
    #[non_exhaustive]
    pub enum HexError {
        /// Upper-case digits: valid hex, but a second spelling of the same bytes, which would
        /// let two documents with different bytes carry the same value.
        #[error("hex must be lowercase")]
        UpperCase,
        /// Not hex at all (an odd length, or a character outside 0-9 a-f).
        #[error("bad hex")]
        Malformed(#[source] hex::FromHexError),
    }

    /// Decode strictly lowercase hex.
    pub fn parse(s: &str) -> Result<Vec<u8>, HexError> {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(HexError::UpperCase);
        }
        hex::decode(s).map_err(HexError::Malformed)
    }

    /// Serialize a byte slice as lowercase hex.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    /// Deserialize a `Vec<u8>` from lowercase hex.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(|e| D::Error::custom(crate::report::report(&e)))
    }

    /// Fixed-size arrays (digests, keys, nonces, signatures).
    pub mod array {
        use serde::{de::Error, Deserialize, Deserializer, Serializer};

        /// Serialize `[u8; N]` as lowercase hex.
        pub fn serialize<S: Serializer, const N: usize>(
            bytes: &[u8; N],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.serialize_str(&hex::encode(bytes))
        }

        /// Deserialize `[u8; N]` from lowercase hex of exactly `2N` digits.
        pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
            d: D,
        ) -> Result<[u8; N], D::Error> {
            let s = String::deserialize(d)?;
            let v = super::parse(&s).map_err(|e| D::Error::custom(crate::report::report(&e)))?;
            <[u8; N]>::try_from(v.as_slice())
                .map_err(|_| D::Error::custom(format!("expected {N} bytes, got {}", v.len())))
        }
    }

    /// Optional byte strings. Use with `#[serde(default, skip_serializing_if =
    /// "Option::is_none")]`: an absent member is omitted rather than `null`, so documents
    /// signed before the member existed keep their exact bytes (and signatures).
    pub mod option {
        use serde::{de::Error, Deserialize, Deserializer, Serializer};

        /// Serialize `Some(bytes)` as lowercase hex (`None` as `null`, normally skipped).
        pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(bytes) => s.serialize_str(&hex::encode(bytes)),
                None => s.serialize_none(),
            }
        }

        /// Deserialize an optional lowercase hex string.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|s| super::parse(&s).map_err(|e| D::Error::custom(crate::report::report(&e))))
                .transpose()
        }
    }

    /// Optional fixed-size arrays, with the same use as [`option`].
    pub mod option_array {
        use serde::{de::Error, Deserialize, Deserializer, Serializer};

        /// Serialize `Some([u8; N])` as lowercase hex (`None` as `null`, normally skipped).
        pub fn serialize<S: Serializer, const N: usize>(
            v: &Option<[u8; N]>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match v {
                Some(bytes) => s.serialize_str(&hex::encode(bytes)),
                None => s.serialize_none(),
            }
        }

        /// Deserialize an optional lowercase hex string of exactly `2N` digits.
        pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
            d: D,
        ) -> Result<Option<[u8; N]>, D::Error> {
            let Some(s) = Option::<String>::deserialize(d)? else {
                return Ok(None);
            };
            let v = super::parse(&s).map_err(|e| D::Error::custom(crate::report::report(&e)))?;
            <[u8; N]>::try_from(v.as_slice())
                .map(Some)
                .map_err(|_| D::Error::custom(format!("expected {N} bytes, got {}", v.len())))
        }
    }

    /// Maps whose values are 32-byte digests.
    pub mod digest_map {
        use serde::{de::Error, ser::SerializeMap, Deserialize, Deserializer, Serializer};
        use std::collections::BTreeMap;

        /// Serialize `name -> [u8; 32]` as `name -> hex`.
        pub fn serialize<S: Serializer>(
            m: &BTreeMap<String, [u8; 32]>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            let mut map = s.serialize_map(Some(m.len()))?;
            for (k, v) in m {
                map.serialize_entry(k, &hex::encode(v))?;
            }
            map.end()
        }

        /// Deserialize `name -> hex` into `name -> [u8; 32]`.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<BTreeMap<String, [u8; 32]>, D::Error> {
            let raw = BTreeMap::<String, String>::deserialize(d)?;
            let mut out = BTreeMap::new();
            for (k, v) in raw {
                let bytes =
                    super::parse(&v).map_err(|e| D::Error::custom(crate::report::report(&e)))?;
                let arr = <[u8; 32]>::try_from(bytes.as_slice())
                    .map_err(|_| D::Error::custom(format!("digest for {k:?} is not 32 bytes")))?;
                out.insert(k, arr);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hex_has_one_spelling_and_says_why_another_is_refused() {
        assert_eq!(hex_bytes::parse("00ff").unwrap(), vec![0, 255]);
        assert_eq!(
            hex_bytes::parse("00FF"),
            Err(hex_bytes::HexError::UpperCase)
        );
        assert!(matches!(
            hex_bytes::parse("0"),
            Err(hex_bytes::HexError::Malformed(hex::FromHexError::OddLength))
        ));
        #[derive(Debug, serde::Deserialize)]
        struct Doc {
            #[serde(with = "hex_bytes")]
            _b: Vec<u8>,
        }
        let e = serde_json::from_str::<Doc>(r#"{"_b":"0g"}"#).unwrap_err();
        assert!(
            e.to_string().starts_with("bad hex: Invalid character 'g'"),
            "{e}"
        );
    }

    #[test]
    fn sorts_and_escapes() {
        let v = json!({"b": 1, "a": [true, null, "x\n\u{1}é"], "A": -5});
        let b = encode_value(&v).unwrap();
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            "{\"A\":-5,\"a\":[true,null,\"x\\n\\u0001é\"],\"b\":1}"
        );
        assert_eq!(decode_value(&b).unwrap(), v);
    }

    #[test]
    fn rejects_non_canonical() {
        assert_eq!(
            decode_value(b"{\"b\":1,\"a\":2}"),
            Err(CanonicalError::NotCanonical)
        );
        assert_eq!(
            decode_value(b"{\"a\": 2}"),
            Err(CanonicalError::NotCanonical)
        );
        assert_eq!(
            decode_value(b"{\"a\":1,\"a\":1}"),
            Err(CanonicalError::NotCanonical)
        );
        assert!(matches!(
            decode_value(b"[1.5]"),
            Err(CanonicalError::Number(_))
        ));
        assert!(matches!(
            decode_value(b"[9007199254740992]"),
            Err(CanonicalError::Number(_))
        ));
        assert_eq!(
            decode_value(b"[\"\\u0041\"]"),
            Err(CanonicalError::NotCanonical)
        );
    }

    fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(MAX_SAFE_INTEGER as i64)..=(MAX_SAFE_INTEGER as i64)).prop_map(|i| json!(i)),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x20\"\\\\a-c\u{e000}\u{1f600}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-cA\u{e000}\u{1f600}]{0,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// The direct serializer and the reference encoder over `Value` agree, and decoding the
        /// output gives back the value.
        #[test]
        fn serializer_matches_reference(v in arb_json()) {
            let reference = encode_value(&v).unwrap();
            proptest::prop_assert_eq!(&encode(&v).unwrap(), &reference);
            proptest::prop_assert_eq!(decode_value(&reference).unwrap(), v);
        }
    }

    #[test]
    fn serializer_rejects_floats_and_big_integers() {
        assert!(matches!(encode(&1.5f64), Err(CanonicalError::Number(_))));
        assert!(matches!(
            encode(&(MAX_SAFE_INTEGER + 1)),
            Err(CanonicalError::Number(_))
        ));
        assert!(matches!(encode(&i64::MIN), Err(CanonicalError::Number(_))));
        assert_eq!(
            encode(&-(MAX_SAFE_INTEGER as i64)).unwrap(),
            b"-9007199254740991"
        );
        let mut m = std::collections::BTreeMap::new();
        m.insert(1u8, 2u8);
        assert!(matches!(encode(&m), Err(CanonicalError::Shape(_))));
    }

    #[test]
    fn utf16_key_order() {
        // In UTF-8 bytes U+FFFD (EF BF BD) sorts before U+1F600 (F0 9F 98 80); in UTF-16 code
        // units U+1F600 is the surrogate pair D83D DE00, which sorts before FFFD. RFC 8785 uses
        // UTF-16.
        let v = json!({"\u{fffd}": 1, "\u{1f600}": 2});
        let b = encode_value(&v).unwrap();
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            "{\"\u{1f600}\":2,\"\u{fffd}\":1}"
        );
    }
}
