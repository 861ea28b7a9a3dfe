//! The workspace's rule for error types (`attest::report`): an error whose cause is another
//! error returns it from `source()` and does not repeat it in its own message. Breaking it
//! prints every cause twice (or three times) wherever a chain is shown, as hostd's startup
//! errors once did. This test reads every `#[error("…")]` of the workspace's sources and
//! fails on a message that interpolates the variant's own `#[source]`, `#[from]` or `source`
//! field.

use std::path::{Path, PathBuf};

/// One `#[error]` message that repeats its source.
#[derive(Debug)]
struct Repeat {
    file: PathBuf,
    line: usize,
    message: String,
    field: String,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The string literal starting at `at` (a `"`), unescaped only as far as this test needs,
/// and the index just past its closing quote.
fn literal(s: &[u8], at: usize) -> Option<(String, usize)> {
    let mut i = at + 1;
    let mut text = Vec::new();
    while i < s.len() {
        match s[i] {
            b'\\' => {
                text.push(b'\\');
                if let Some(&c) = s.get(i + 1) {
                    text.push(c);
                }
                i += 2;
            }
            b'"' => return Some((String::from_utf8_lossy(&text).into_owned(), i + 1)),
            c => {
                text.push(c);
                i += 1;
            }
        }
    }
    None
}

/// The index just past the bracket that closes the one opened before `at`.
fn close(s: &[u8], mut at: usize) -> Option<usize> {
    let mut depth = 1;
    while at < s.len() {
        match s[at] {
            b'"' => at = literal(s, at)?.1 - 1,
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// Skips whitespace, doc comments and attributes between an `#[error]` and its item.
fn skip_to_item(s: &[u8], mut at: usize) -> usize {
    loop {
        while at < s.len() && s[at].is_ascii_whitespace() {
            at += 1;
        }
        if s[at..].starts_with(b"//") {
            while at < s.len() && s[at] != b'\n' {
                at += 1;
            }
        } else if s[at..].starts_with(b"#[") {
            match close(s, at + 2) {
                Some(end) => at = end,
                None => return s.len(),
            }
        } else {
            return at;
        }
    }
}

/// The names under which the message could interpolate the item's source: tuple indices or
/// field names carrying `#[source]`/`#[from]`, and a field called `source`.
fn source_fields(body: &str, tuple: bool) -> Vec<String> {
    let mut fields = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in body.char_indices() {
        match c {
            '(' | '[' | '{' | '<' => depth += 1,
            ')' | ']' | '}' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    for (index, part) in parts.iter().enumerate() {
        let marked = part.contains("#[source]") || part.contains("#[from]");
        if tuple {
            if marked {
                fields.push(index.to_string());
            }
            continue;
        }
        let code: String = part
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join(" ");
        let Some(colon) = code.find(':') else {
            continue;
        };
        let name = code[..colon].split_whitespace().last().unwrap_or("");
        if marked || name == "source" {
            fields.push(name.to_owned());
        }
    }
    fields
}

fn placeholders(message: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = message;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(stripped) = rest.strip_prefix('{') {
            rest = stripped;
            continue;
        }
        let end = rest.find('}').unwrap_or(rest.len());
        let name = rest[..end].split(':').next().unwrap_or("");
        names.push(name.to_owned());
        rest = &rest[end..];
    }
    names
}

fn repeats_in(file: &Path, text: &str) -> Vec<Repeat> {
    let s = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = text[from..].find("#[error(") {
        let at = from + pos;
        from = at + 8;
        let mut i = from;
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if s.get(i) != Some(&b'"') {
            continue;
        }
        let Some((message, after)) = literal(s, i) else {
            continue;
        };
        let Some(attr_end) = close(s, after) else {
            continue;
        };
        let mut item = skip_to_item(s, attr_end);
        let Some(open) = text[item..].find(['(', '{']).map(|o| item + o) else {
            continue;
        };
        item = open + 1;
        let Some(end) = close(s, item) else {
            continue;
        };
        let fields = source_fields(&text[item..end - 1], s[open] == b'(');
        for name in placeholders(&message) {
            if fields.contains(&name) {
                found.push(Repeat {
                    file: file.to_owned(),
                    line: text[..at].matches('\n').count() + 1,
                    message: message.clone(),
                    field: name,
                });
            }
        }
    }
    found
}

#[test]
fn no_error_message_repeats_its_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let repeats: Vec<Repeat> = files
        .iter()
        .filter_map(|f| Some((f, std::fs::read_to_string(f).ok()?)))
        .flat_map(|(f, text)| repeats_in(f, &text))
        .filter(|r| !r.file.ends_with("tests/error_messages.rs"))
        .collect();
    let shown: Vec<String> = repeats
        .iter()
        .map(|r| {
            let (file, line, message, field) = (r.file.display(), r.line, &r.message, &r.field);
            format!("{file}:{line}: \"{message}\" shows `{field}`")
        })
        .collect();
    assert!(
        shown.is_empty(),
        "messages that repeat their source (return it from source() only):\n{}",
        shown.join("\n")
    );
}

#[test]
fn the_check_finds_a_repeated_source() {
    let sample = r##"
        #[derive(Debug, thiserror::Error)]
        pub enum E {
            #[error("reading {path}: {source}")]
            Read { path: String, source: std::io::Error },
            #[error("parsing: {0}")]
            Parse(#[from] std::num::ParseIntError),
            #[error("store")]
            Store(#[source] std::io::Error),
            #[error("{0} is not a key")]
            NotKey(String),
        }
    "##;
    let found = repeats_in(Path::new("sample.rs"), sample);
    let fields: Vec<&str> = found.iter().map(|r| r.field.as_str()).collect();
    assert_eq!(fields, ["source", "0"], "{found:#?}");
    assert_eq!(found[0].line, 4);
}
