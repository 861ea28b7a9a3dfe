//! Loading a policy file: TOML text to a validated [`Policy`], or every error found.
//!
//! The loader walks a span-preserving parse tree (toml_edit) instead of deriving serde types,
//! so that it can keep going after the first mistake and point each error at its line, column
//! and field path: an operator fixing a 200-rule file wants the whole list at once.

use crate::cidr::Cidr;
use crate::jurisdiction::{Jurisdiction, JurisdictionError, JurisdictionSet};
use crate::model::{
    Action, AttestationStatus, ClearanceRequirement, Endpoint, Index, Mode, NodeRequirements,
    Policy, PolicyDigest, Rule, Tenant, Version,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use toml_edit::{ImDocument, Item, TableLike, Value};

/// The policy file format this crate reads (`[policy] format = 1`).
pub const FORMAT_VERSION: i64 = 1;

/// Largest number of classifications (they are kept as a 64-bit set).
pub const MAX_CLASSIFICATIONS: usize = 64;

/// Largest number of rules (rule indices are 16-bit in the decision index).
pub const MAX_RULES: usize = 10_000;

/// One problem in a policy file, located for the person who has to fix it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoadError {
    /// 1-based line (0 when the position is unknown).
    pub line: usize,
    /// 1-based column in characters (0 when unknown).
    pub column: usize,
    /// Field path, e.g. `rules[3].allow_in[1]` (`rules[3]` is the fourth rule).
    pub field: String,
    /// What is wrong, and where useful, what would be right.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}, column {}: ", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}

/// Loads and validates a policy from the exact file text. The digest covers these bytes.
pub fn from_toml_str(text: &str) -> Result<Policy, Vec<LoadError>> {
    Loader::new(text).load()
}

struct Loader<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
    errors: Vec<LoadError>,
}

/// A string value with its location.
#[derive(Clone)]
struct Located<T> {
    value: T,
    span: Option<Range<usize>>,
    field: String,
}

impl<'a> Loader<'a> {
    fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Loader {
            text,
            line_starts,
            errors: Vec::new(),
        }
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        let start = self.line_starts[line];
        let column = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(0);
        (line + 1, column + 1)
    }

    fn err(&mut self, span: Option<Range<usize>>, field: &str, message: impl Into<String>) {
        let (line, column) = span.map(|s| self.position(s.start)).unwrap_or((0, 0));
        self.errors.push(LoadError {
            line,
            column,
            field: field.to_string(),
            message: message.into(),
        });
    }

    fn line_of(&self, span: &Option<Range<usize>>) -> usize {
        span.as_ref().map(|s| self.position(s.start).0).unwrap_or(0)
    }

    // ---- typed accessors: each reports its own error and returns None on mismatch ----

    fn check_keys(
        &mut self,
        table: &dyn TableLike,
        span: Option<Range<usize>>,
        path: &str,
        allowed: &[&str],
    ) {
        let mut unknown = Vec::new();
        for (k, item) in table.iter() {
            if !allowed.contains(&k) {
                unknown.push((k.to_string(), item.span()));
            }
        }
        for (k, s) in unknown {
            let key_span = table
                .key(&k)
                .and_then(|key| key.span())
                .or(s)
                .or(span.clone());
            self.err(
                key_span,
                &join(path, &k),
                format!("unknown field (expected one of: {})", allowed.join(", ")),
            );
        }
    }

    /// A scalar field: absent is `None` (reported when `required`); present but not
    /// convertible by `convert` is reported as `expected` and gives `None`.
    #[allow(clippy::too_many_arguments)]
    fn get_scalar<T>(
        &mut self,
        table: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
        key: &str,
        required: bool,
        expected: &str,
        convert: impl Fn(&Item) -> Option<T>,
    ) -> Option<Located<T>> {
        let field = join(path, key);
        let Some(item) = table.get(key) else {
            if required {
                self.err(span.clone(), &field, "missing required field");
            }
            return None;
        };
        match convert(item) {
            Some(value) => Some(Located {
                value,
                span: item.span(),
                field,
            }),
            None => {
                self.err(item.span(), &field, expected);
                None
            }
        }
    }

    fn get_str(
        &mut self,
        table: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
        key: &str,
        required: bool,
    ) -> Option<Located<String>> {
        self.get_scalar(table, span, path, key, required, "expected a string", |i| {
            i.as_str().map(str::to_string)
        })
    }

    fn get_int(
        &mut self,
        table: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
        key: &str,
        required: bool,
    ) -> Option<Located<i64>> {
        self.get_scalar(
            table,
            span,
            path,
            key,
            required,
            "expected an integer",
            Item::as_integer,
        )
    }

    /// An optional boolean.
    fn get_bool(&mut self, table: &dyn TableLike, path: &str, key: &str) -> Option<Located<bool>> {
        self.get_scalar(
            table,
            &None,
            path,
            key,
            false,
            "expected true or false",
            Item::as_bool,
        )
    }

    /// The ids in `list` that `declared` knows, first occurrence order, without repeats; each
    /// unknown one is reported as an `unknown {what}` to be declared under `section`.
    fn declared_ids(
        &mut self,
        list: &[Located<String>],
        what: &str,
        section: &str,
        declared: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for id in list {
            if !declared(&id.value) {
                self.err(
                    id.span.clone(),
                    &id.field,
                    format!("unknown {what} '{}' (declare it under {section})", id.value),
                );
            } else if !out.contains(&id.value) {
                out.push(id.value.clone());
            }
        }
        out
    }

    /// An array of strings; `None` if absent or wrong (wrong is reported).
    fn get_str_list(
        &mut self,
        table: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
        key: &str,
        required: bool,
    ) -> Option<Located<Vec<Located<String>>>> {
        let field = join(path, key);
        let Some(item) = table.get(key) else {
            if required {
                self.err(span.clone(), &field, "missing required field");
            }
            return None;
        };
        let Some(arr) = item.as_array() else {
            self.err(item.span(), &field, "expected an array of strings");
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, v) in arr.iter().enumerate() {
            let f = format!("{field}[{i}]");
            match v.as_str() {
                Some(s) => out.push(Located {
                    value: s.to_string(),
                    span: v.span(),
                    field: f,
                }),
                None => {
                    self.err(v.span(), &f, "expected a string");
                    ok = false;
                }
            }
        }
        ok.then_some(Located {
            value: out,
            span: item.span(),
            field,
        })
    }

    /// A sub-table (`[x.y]` or inline `{ ... }`).
    fn get_table<'t>(
        &mut self,
        table: &'t dyn TableLike,
        path: &str,
        key: &str,
    ) -> Option<(&'t dyn TableLike, Option<Range<usize>>)> {
        let item = table.get(key)?;
        match item.as_table_like() {
            Some(t) => Some((t, item.span())),
            None => {
                self.err(item.span(), &join(path, key), "expected a table");
                None
            }
        }
    }

    /// An array of tables (`[[x]]` or `x = [{...}, ...]`).
    fn get_table_array<'t>(
        &mut self,
        root: &'t dyn TableLike,
        key: &str,
    ) -> Vec<(&'t dyn TableLike, Option<Range<usize>>)> {
        let Some(item) = root.get(key) else {
            return Vec::new();
        };
        match item {
            Item::ArrayOfTables(a) => a.iter().map(|t| (t as &dyn TableLike, t.span())).collect(),
            Item::Value(Value::Array(a)) => {
                let mut out = Vec::new();
                for (i, v) in a.iter().enumerate() {
                    match v.as_inline_table() {
                        Some(t) => out.push((t as &dyn TableLike, v.span())),
                        None => {
                            self.err(v.span(), &format!("{key}[{i}]"), "expected a table");
                        }
                    }
                }
                out
            }
            other => {
                self.err(
                    other.span(),
                    key,
                    format!("expected an array of tables ([[{key}]])"),
                );
                Vec::new()
            }
        }
    }

    fn jurisdiction(&mut self, s: &Located<String>) -> Option<Jurisdiction> {
        match Jurisdiction::parse(&s.value) {
            Ok(j) => Some(j),
            Err(e) => {
                let hint = match (&e, s.value.as_str()) {
                    (JurisdictionError::UnknownCountry(_), "UK") => {
                        " (the United Kingdom is GB)".to_string()
                    }
                    (JurisdictionError::Malformed(_), v)
                        if Jurisdiction::parse(&v.to_ascii_uppercase()).is_ok() =>
                    {
                        format!(" (codes are uppercase: {})", v.to_ascii_uppercase())
                    }
                    _ => String::new(),
                };
                self.err(s.span.clone(), &s.field, format!("{e}{hint}"));
                None
            }
        }
    }

    fn id(&mut self, s: &Located<String>, what: &str) -> bool {
        let ok = !s.value.is_empty()
            && s.value.len() <= 128
            && s.value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !ok {
            self.err(
                s.span.clone(),
                &s.field,
                format!(
                    "{what} '{}' must be 1-128 characters of letters, digits, '-', '_' or '.'",
                    s.value
                ),
            );
        }
        ok
    }

    // ---- the document ----

    /// The whole file, top-level table by top-level table. Every section reports its own
    /// errors and carries on with what it could read, so one pass finds every mistake; the
    /// policy is only built when none was found.
    fn load(mut self) -> Result<Policy, Vec<LoadError>> {
        let doc = match ImDocument::parse(self.text) {
            Ok(d) => d,
            Err(e) => {
                let msg = e.message().trim().to_string();
                self.err(e.span(), "", format!("TOML syntax error: {msg}"));
                return Err(self.errors);
            }
        };
        let root: &dyn TableLike = doc.as_table();
        self.check_keys(
            root,
            Some(0..0),
            "",
            &[
                "policy",
                "classifications",
                "groups",
                "tenants",
                "endpoints",
                "rules",
            ],
        );
        let header = self.policy_header(root);
        let classifications = self.classifications(root);
        let class_by_name: HashMap<String, u8> = classifications
            .iter()
            .take(MAX_CLASSIFICATIONS)
            .enumerate()
            .map(|(i, c)| (c.clone(), i as u8))
            .collect();
        let groups = self.groups(root);
        let (tenants, tenant_by_id) = self.tenants(root);
        let endpoints = self.endpoints(root);
        let (endpoint_by_id, endpoint_by_host) = endpoint_lookups(&endpoints);
        let ctx = RuleCtx {
            class_by_name: &class_by_name,
            groups: &groups,
            tenant_by_id: &tenant_by_id,
            endpoint_by_id: &endpoint_by_id,
        };
        let rules = self.rules(root, &ctx);

        let nclasses = classifications.len().min(MAX_CLASSIFICATIONS);
        let index = self.build_index(&rules, nclasses, &classifications, &tenants);

        if !self.errors.is_empty() {
            self.errors.sort_by_key(|e| (e.line == 0, e.line, e.column));
            return Err(self.errors);
        }
        let digest = PolicyDigest::of(self.text.as_bytes());
        Ok(Policy {
            name: header.name,
            version: header.version,
            description: header.description,
            classifications,
            groups,
            tenants,
            endpoints,
            rules,
            digest,
            digest_text: digest.to_string(),
            index: Index {
                nclasses,
                class_by_name,
                tenant_by_id,
                endpoint_by_id,
                endpoint_by_host,
                ..index
            },
        })
    }

    /// `[policy]`: name, format and version. Missing or wrong fields are reported and leave
    /// the defaults (empty name, version 0) in place.
    fn policy_header(&mut self, root: &dyn TableLike) -> Header {
        let mut header = Header::default();
        let Some((t, span)) = self.get_table(root, "", "policy") else {
            if root.get("policy").is_none() {
                self.err(None, "policy", "missing required table [policy]");
            }
            return header;
        };
        self.check_keys(
            t,
            span.clone(),
            "policy",
            &["name", "format", "version", "description"],
        );
        if let Some(n) = self.get_str(t, &span, "policy", "name", true) {
            if self.id(&n, "policy name") {
                header.name = n.value;
            }
        }
        if let Some(d) = self.get_str(t, &span, "policy", "description", false) {
            header.description = d.value;
        }
        if let Some(f) = self.get_int(t, &span, "policy", "format", true) {
            if f.value != FORMAT_VERSION {
                self.err(
                    f.span,
                    &f.field,
                    format!(
                        "unsupported format {} (this version reads format {FORMAT_VERSION})",
                        f.value
                    ),
                );
            }
        }
        if let Some(v) = self.get_int(t, &span, "policy", "version", true) {
            if v.value < 1 {
                self.err(v.span, &v.field, "version must be a positive integer");
            } else {
                header.version = v.value as u64;
            }
        }
        header
    }

    /// `[classifications] order`: the valid, distinct names, least sensitive first (their
    /// position is their rank).
    fn classifications(&mut self, root: &dyn TableLike) -> Vec<String> {
        let mut classifications: Vec<String> = Vec::new();
        let Some((t, span)) = self.get_table(root, "", "classifications") else {
            if root.get("classifications").is_none() {
                self.err(
                    None,
                    "classifications",
                    "missing required table [classifications] with order = [...]",
                );
            }
            return classifications;
        };
        self.check_keys(t, span.clone(), "classifications", &["order"]);
        let Some(order) = self.get_str_list(t, &span, "classifications", "order", true) else {
            return classifications;
        };
        if order.value.is_empty() {
            self.err(
                order.span.clone(),
                &order.field,
                "at least one classification is required",
            );
        }
        if order.value.len() > MAX_CLASSIFICATIONS {
            self.err(
                order.span.clone(),
                &order.field,
                format!("at most {MAX_CLASSIFICATIONS} classifications are supported"),
            );
        }
        for c in &order.value {
            if !self.name_ok(c, "classification") {
                continue;
            }
            if classifications.contains(&c.value) {
                self.err(
                    c.span.clone(),
                    &c.field,
                    format!("classification '{}' is listed twice", c.value),
                );
            } else {
                classifications.push(c.value.clone());
            }
        }
        classifications
    }

    /// `[groups]`: named lists of jurisdiction codes, by name. A group whose name is invalid
    /// or that is not an array is left out; one with bad members keeps the good ones.
    fn groups(&mut self, root: &dyn TableLike) -> BTreeMap<String, Vec<Jurisdiction>> {
        let mut groups = BTreeMap::new();
        let Some((t, _span)) = self.get_table(root, "", "groups") else {
            return groups;
        };
        let entries: Vec<(String, &Item)> = t.iter().map(|(k, v)| (k.to_string(), v)).collect();
        for (k, item) in entries {
            let field = join("groups", &k);
            let key_span = t.key(&k).and_then(|key| key.span()).or(item.span());
            if !is_group_name(&k) {
                self.err(
                    key_span.clone(),
                    &field,
                    format!("group name '{k}' must be lowercase letters, digits and '-', start with a letter, and not be 'home' (uppercase names are jurisdiction codes)"),
                );
                continue;
            }
            let Some(arr) = item.as_array() else {
                self.err(
                    item.span(),
                    &field,
                    "expected an array of jurisdiction codes",
                );
                continue;
            };
            let members = self.group_members(&field, arr);
            if arr.is_empty() {
                self.err(
                    item.span(),
                    &field,
                    "a group must list at least one jurisdiction",
                );
            }
            groups.insert(k, members);
        }
        groups
    }

    /// The jurisdictions of one group (`field` is `groups.NAME`). Groups do not nest, so
    /// another group's name, `*` and `home` are errors here.
    fn group_members(&mut self, field: &str, arr: &toml_edit::Array) -> Vec<Jurisdiction> {
        let mut members = Vec::new();
        for (i, v) in arr.iter().enumerate() {
            let f = format!("{field}[{i}]");
            let Some(s) = v.as_str() else {
                self.err(v.span(), &f, "expected a jurisdiction code string");
                continue;
            };
            if let Some(upper) = uppercase_hint(s) {
                self.err(
                    v.span(),
                    &f,
                    format!("'{s}' is not a jurisdiction code (codes are uppercase: {upper})"),
                );
                continue;
            }
            if is_group_name(s) || s == "*" || s == "home" {
                self.err(v.span(), &f, format!("'{s}': groups list jurisdiction codes only (no nested groups, '*' or 'home')"));
                continue;
            }
            let loc = Located {
                value: s.to_string(),
                span: v.span(),
                field: f,
            };
            if let Some(j) = self.jurisdiction(&loc) {
                members.push(j);
            }
        }
        members
    }

    /// `[[tenants]]`: the valid, distinct tenants, and each one's position by id.
    fn tenants(&mut self, root: &dyn TableLike) -> (Vec<Tenant>, HashMap<String, usize>) {
        let mut tenants: Vec<Tenant> = Vec::new();
        let mut tenant_by_id: HashMap<String, usize> = HashMap::new();
        for (i, (t, span)) in self
            .get_table_array(root, "tenants")
            .into_iter()
            .enumerate()
        {
            let path = format!("tenants[{i}]");
            self.check_keys(t, span.clone(), &path, &["id", "home", "description"]);
            let id = self.get_str(t, &span, &path, "id", true);
            let home = self.get_str(t, &span, &path, "home", true);
            let _ = self.get_str(t, &span, &path, "description", false);
            let home = home.and_then(|h| self.jurisdiction(&h));
            if let (Some(id), Some(home)) = (id, home) {
                if !self.id(&id, "tenant id") {
                    continue;
                }
                if tenant_by_id.contains_key(&id.value) {
                    self.err(
                        id.span,
                        &id.field,
                        format!("tenant '{}' is declared twice", id.value),
                    );
                    continue;
                }
                tenant_by_id.insert(id.value.clone(), tenants.len());
                tenants.push(Tenant { id: id.value, home });
            }
        }
        (tenants, tenant_by_id)
    }

    /// `[[endpoints]]`: the valid, distinct endpoints, checked not to overlap.
    fn endpoints(&mut self, root: &dyn TableLike) -> Vec<Endpoint> {
        let mut endpoints: Vec<Endpoint> = Vec::new();
        let mut endpoint_spans: Vec<(Option<Range<usize>>, String)> = Vec::new();
        for (i, (t, span)) in self
            .get_table_array(root, "endpoints")
            .into_iter()
            .enumerate()
        {
            let path = format!("endpoints[{i}]");
            self.check_keys(
                t,
                span.clone(),
                &path,
                &["id", "jurisdiction", "cidrs", "hosts", "description"],
            );
            let id = self.get_str(t, &span, &path, "id", true);
            let jur = self
                .get_str(t, &span, &path, "jurisdiction", true)
                .and_then(|j| self.jurisdiction(&j));
            let description = self
                .get_str(t, &span, &path, "description", false)
                .map(|d| d.value)
                .unwrap_or_default();
            let cidr_list = self.get_str_list(t, &span, &path, "cidrs", false);
            let host_list = self.get_str_list(t, &span, &path, "hosts", false);
            let cidrs = self.endpoint_cidrs(cidr_list.as_ref());
            let hosts = self.endpoint_hosts(host_list.as_ref());
            if cidr_list.as_ref().is_none_or(|l| l.value.is_empty())
                && host_list.as_ref().is_none_or(|l| l.value.is_empty())
            {
                self.err(
                    span.clone(),
                    &path,
                    "an endpoint needs at least one of cidrs or hosts",
                );
            }
            if let (Some(id), Some(jurisdiction)) = (id, jur) {
                if !self.id(&id, "endpoint id") {
                    continue;
                }
                if endpoints.iter().any(|e| e.id == id.value) {
                    self.err(
                        id.span,
                        &id.field,
                        format!("endpoint '{}' is declared twice", id.value),
                    );
                    continue;
                }
                endpoint_spans.push((span.clone(), path.clone()));
                endpoints.push(Endpoint {
                    id: id.value,
                    jurisdiction,
                    cidrs,
                    hosts,
                    description,
                });
            }
        }
        self.check_endpoint_overlaps(&endpoints, &endpoint_spans);
        endpoints
    }

    /// An endpoint's `cidrs` that parse.
    fn endpoint_cidrs(&mut self, list: Option<&Located<Vec<Located<String>>>>) -> Vec<Cidr> {
        let mut cidrs = Vec::new();
        for c in list.map(|l| l.value.as_slice()).unwrap_or_default() {
            match Cidr::parse(&c.value) {
                Ok(p) => cidrs.push(p),
                Err(e) => self.err(c.span.clone(), &c.field, e.to_string()),
            }
        }
        cidrs
    }

    /// An endpoint's `hosts` that are DNS names, lowercased and without a trailing dot (the
    /// form egress decisions compare against).
    fn endpoint_hosts(&mut self, list: Option<&Located<Vec<Located<String>>>>) -> Vec<String> {
        let mut hosts = Vec::new();
        for h in list.map(|l| l.value.as_slice()).unwrap_or_default() {
            let lower = h.value.trim_end_matches('.').to_ascii_lowercase();
            if !is_host_name(&lower) {
                self.err(
                    h.span.clone(),
                    &h.field,
                    format!("'{}' is not a DNS host name", h.value),
                );
            } else {
                hosts.push(lower);
            }
        }
        hosts
    }

    /// Endpoints must not overlap: an address (or host name) has to map to exactly one
    /// jurisdiction. `spans[i]` locates `endpoints[i]`; each clash is reported at the later one.
    fn check_endpoint_overlaps(
        &mut self,
        endpoints: &[Endpoint],
        spans: &[(Option<Range<usize>>, String)],
    ) {
        for a in 0..endpoints.len() {
            for b in (a + 1)..endpoints.len() {
                let clash = endpoints[a].cidrs.iter().find_map(|x| {
                    endpoints[b]
                        .cidrs
                        .iter()
                        .find(|y| x.overlaps(y))
                        .map(|y| (*x, *y))
                });
                if let Some((x, y)) = clash {
                    let (span, path) = spans[b].clone();
                    self.err(span, &join(&path, "cidrs"), format!(
                        "{y} of endpoint '{}' overlaps {x} of endpoint '{}': every address must belong to one endpoint",
                        endpoints[b].id, endpoints[a].id
                    ));
                }
                if let Some(h) = endpoints[a]
                    .hosts
                    .iter()
                    .find(|h| endpoints[b].hosts.contains(h))
                {
                    let (span, path) = spans[b].clone();
                    self.err(
                        span,
                        &join(&path, "hosts"),
                        format!(
                            "host '{h}' is listed by endpoints '{}' and '{}'",
                            endpoints[a].id, endpoints[b].id
                        ),
                    );
                }
            }
        }
    }

    /// `[[rules]]`: the valid rules with distinct ids (at most [`MAX_RULES`] are read).
    fn rules(&mut self, root: &dyn TableLike, ctx: &RuleCtx<'_>) -> Vec<Rule> {
        let mut rules: Vec<Rule> = Vec::new();
        let rule_tables = self.get_table_array(root, "rules");
        if rule_tables.len() > MAX_RULES {
            self.err(
                None,
                "rules",
                format!("at most {MAX_RULES} rules are supported"),
            );
        }
        for (i, (t, span)) in rule_tables.into_iter().take(MAX_RULES).enumerate() {
            if let Some(rule) = self.rule(ctx, i, t, span) {
                if rules.iter().any(|r| r.id == rule.id) {
                    let line = rule.line;
                    self.errors.push(LoadError {
                        line,
                        column: 1,
                        field: format!("rules[{i}].id"),
                        message: format!("rule id '{}' is used twice", rule.id),
                    });
                    continue;
                }
                rules.push(rule);
            }
        }
        rules
    }

    fn name_ok(&mut self, s: &Located<String>, what: &str) -> bool {
        let ok = !s.value.is_empty()
            && s.value.len() <= 64
            && s.value
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase())
            && s.value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            self.err(
                s.span.clone(),
                &s.field,
                format!("{what} name '{}' must be lowercase letters, digits, '-' or '_', starting with a letter", s.value),
            );
        }
        ok
    }

    fn class(&mut self, ctx: &RuleCtx<'_>, s: &Located<String>) -> Option<u8> {
        match ctx.class_by_name.get(&s.value) {
            Some(i) => Some(*i),
            None => {
                let mut known: Vec<(&String, &u8)> = ctx.class_by_name.iter().collect();
                known.sort_by_key(|(_, i)| **i);
                let known: Vec<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
                self.err(
                    s.span.clone(),
                    &s.field,
                    format!(
                        "unknown classification '{}' (the policy defines: {})",
                        s.value,
                        known.join(", ")
                    ),
                );
                None
            }
        }
    }

    /// One `[[rules]]` table. Each part reports its own errors; the rule is built only if
    /// none of them found one (so a broken rule never half-applies).
    fn rule(
        &mut self,
        ctx: &RuleCtx<'_>,
        i: usize,
        t: &dyn TableLike,
        span: Option<Range<usize>>,
    ) -> Option<Rule> {
        let path = format!("rules[{i}]");
        let errors_before = self.errors.len();
        self.check_keys(
            t,
            span.clone(),
            &path,
            &[
                "id",
                "description",
                "actions",
                "classification",
                "classifications",
                "classification_at_least",
                "classification_at_most",
                "tenants",
                "allow_in",
                "mode",
                "exempt_endpoints",
                "node",
                "operator",
            ],
        );
        let id = self.get_str(t, &span, &path, "id", true);
        if let Some(id) = &id {
            self.id(id, "rule id");
        }
        let description = self
            .get_str(t, &span, &path, "description", false)
            .map(|d| d.value)
            .unwrap_or_default();
        let actions = self.rule_actions(t, &span, &path);
        let classes = self.rule_classes(ctx, t, &span, &path);
        let tenants = self.rule_tenants(ctx, t, &span, &path);
        let allow = self.rule_allow_in(ctx, t, &span, &path, tenants.is_some());
        let mode = self.rule_mode(t, &span, &path);
        let exempt = self.rule_exemptions(ctx, t, &span, &path, actions);
        let node = self.node_requirements(t, &path, actions);
        let clearance = self.operator_requirements(ctx, t, &path, actions);

        if self.errors.len() > errors_before {
            return None;
        }
        let classes = classes?;
        let id = id?;
        Some(Rule {
            line: self.line_of(&span),
            id: id.value,
            description,
            actions,
            classes,
            tenants,
            allow: allow.set,
            allow_home: allow.home,
            allow_text: allow.text,
            node,
            clearance,
            exempt,
            mode,
        })
    }

    /// A rule's `actions`, as a bit set over [`Action::index`].
    fn rule_actions(&mut self, t: &dyn TableLike, span: &Option<Range<usize>>, path: &str) -> u8 {
        let mut actions = 0u8;
        if let Some(list) = self.get_str_list(t, span, path, "actions", true) {
            if list.value.is_empty() {
                self.err(
                    list.span.clone(),
                    &list.field,
                    "rule can never match: actions is empty",
                );
            }
            for a in &list.value {
                match Action::from_name(&a.value) {
                    Some(act) => actions |= 1 << act.index(),
                    None => self.err(
                        a.span.clone(),
                        &a.field,
                        format!(
                            "unknown action '{}' (expected place, store, egress or operator-access)",
                            a.value
                        ),
                    ),
                }
            }
        }
        actions
    }

    /// A rule's classifications, as a bit set over their ranks; `None` when they are missing,
    /// ambiguous or unknown. Exactly one of three forms: `classification`, `classifications`,
    /// or a range `classification_at_least`/`_at_most`.
    fn rule_classes(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
    ) -> Option<u64> {
        let exact = self.get_str(t, span, path, "classification", false);
        let set = self.get_str_list(t, span, path, "classifications", false);
        let lo = self.get_str(t, span, path, "classification_at_least", false);
        let hi = self.get_str(t, span, path, "classification_at_most", false);
        let forms =
            exact.is_some() as u8 + set.is_some() as u8 + (lo.is_some() || hi.is_some()) as u8;
        if forms == 0 {
            let present = [
                "classification",
                "classifications",
                "classification_at_least",
                "classification_at_most",
            ]
            .iter()
            .any(|k| t.get(k).is_some());
            if !present {
                self.err(
                    span.clone(),
                    path,
                    "missing classification: give classification, classifications, or classification_at_least/_at_most",
                );
            }
            None
        } else if forms > 1 {
            self.err(
                span.clone(),
                path,
                "give only one of classification, classifications, or classification_at_least/_at_most",
            );
            None
        } else if let Some(c) = &exact {
            self.class(ctx, c).map(|ix| 1 << ix)
        } else if let Some(list) = &set {
            let mut class_ok = true;
            if list.value.is_empty() {
                self.err(
                    list.span.clone(),
                    &list.field,
                    "rule can never match: classifications is empty",
                );
                class_ok = false;
            }
            let mut classes = 0u64;
            for c in &list.value {
                match self.class(ctx, c) {
                    Some(ix) => classes |= 1 << ix,
                    None => class_ok = false,
                }
            }
            class_ok.then_some(classes)
        } else {
            self.class_range(ctx, path, &lo, &hi)
        }
    }

    /// The classifications from `lo` to `hi` inclusive (a missing end is the lowest or the
    /// highest); `None` when an end is unknown or the range is empty.
    fn class_range(
        &mut self,
        ctx: &RuleCtx<'_>,
        path: &str,
        lo: &Option<Located<String>>,
        hi: &Option<Located<String>>,
    ) -> Option<u64> {
        let n = ctx.class_by_name.len();
        let lo_ix = match lo {
            Some(c) => self.class(ctx, c),
            None => Some(0),
        };
        let hi_ix = match hi {
            Some(c) => self.class(ctx, c),
            None => Some(n.saturating_sub(1) as u8),
        };
        match (lo_ix, hi_ix) {
            (Some(l), Some(h)) if l <= h => Some((l..=h).fold(0u64, |set, ix| set | 1 << ix)),
            (Some(_), Some(_)) => {
                let span_at = hi_span(lo, hi);
                let (lo, hi) = (
                    lo.as_ref().map(|x| x.value.as_str()).unwrap_or(""),
                    hi.as_ref().map(|x| x.value.as_str()).unwrap_or(""),
                );
                self.err(
                    span_at,
                    path,
                    format!("rule can never match: classification_at_least '{lo}' is above classification_at_most '{hi}'"),
                );
                None
            }
            _ => None,
        }
    }

    /// A rule's `tenants` (declared ones only, without repeats); `None` when absent, meaning
    /// every tenant.
    fn rule_tenants(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
    ) -> Option<Vec<String>> {
        let list = self.get_str_list(t, span, path, "tenants", false)?;
        if list.value.is_empty() {
            self.err(
                list.span.clone(),
                &list.field,
                "rule can never match: tenants is empty (omit it to apply to every tenant)",
            );
        }
        Some(
            self.declared_ids(&list.value, "tenant", "[[tenants]]", |id| {
                ctx.tenant_by_id.contains_key(id)
            }),
        )
    }

    /// A rule's `allow_in`: jurisdiction codes, group names (expanded), `*` (anywhere) and
    /// `home` (the tenant's home jurisdiction). `names_tenants` says whether the rule lists
    /// its tenants, without which `home` needs declared tenants.
    fn rule_allow_in(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
        names_tenants: bool,
    ) -> AllowIn {
        let mut allow = AllowIn::default();
        let Some(list) = self.get_str_list(t, span, path, "allow_in", true) else {
            return allow;
        };
        let mut any = false;
        let mut members = Vec::new();
        let mut words = Vec::new();
        for s in &list.value {
            if s.value != "home" {
                words.push(s.value.clone());
            }
            if s.value == "*" {
                any = true;
            } else if s.value == "home" {
                allow.home = true;
            } else if is_group_name(&s.value) {
                match ctx.groups.get(&s.value) {
                    Some(g) => members.extend(g.iter().copied()),
                    None => {
                        let hint = uppercase_hint(&s.value)
                            .map(|u| {
                                format!("; if you meant the jurisdiction, codes are uppercase: {u}")
                            })
                            .unwrap_or_default();
                        self.err(
                            s.span.clone(),
                            &s.field,
                            format!(
                                "unknown group '{}' (define it under [groups]{hint})",
                                s.value
                            ),
                        )
                    }
                }
            } else if let Some(j) = self.jurisdiction(s) {
                members.push(j);
            }
        }
        if any && list.value.len() > 1 {
            self.err(
                list.span.clone(),
                &list.field,
                "'*' already means anywhere: list nothing else with it",
            );
        }
        allow.set = if any {
            JurisdictionSet::anywhere()
        } else {
            JurisdictionSet::from_members(members)
        };
        allow.text = if words.is_empty() {
            if allow.home {
                String::new()
            } else {
                "nowhere".to_string()
            }
        } else if any {
            "anywhere".to_string()
        } else {
            words.join(", ")
        };
        if allow.home && !names_tenants && ctx.tenant_by_id.is_empty() {
            self.err(
                list.span.clone(),
                &list.field,
                "'home' needs declared tenants ([[tenants]] with home = ...)",
            );
        }
        allow
    }

    /// A rule's `mode` (default: enforce).
    fn rule_mode(&mut self, t: &dyn TableLike, span: &Option<Range<usize>>, path: &str) -> Mode {
        let Some(m) = self.get_str(t, span, path, "mode", false) else {
            return Mode::Enforce;
        };
        match m.value.as_str() {
            "enforce" => Mode::Enforce,
            "audit" => Mode::Audit,
            other => {
                self.err(
                    m.span,
                    &m.field,
                    format!("unknown mode '{other}' (expected enforce or audit)"),
                );
                Mode::Enforce
            }
        }
    }

    /// A rule's `exempt_endpoints` (declared ones only, sorted, without repeats); only
    /// meaningful for a rule that covers egress.
    fn rule_exemptions(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: &dyn TableLike,
        span: &Option<Range<usize>>,
        path: &str,
        actions: u8,
    ) -> Vec<String> {
        let Some(list) = self.get_str_list(t, span, path, "exempt_endpoints", false) else {
            return Vec::new();
        };
        if actions & (1 << Action::Egress.index()) == 0 {
            self.err(
                list.span.clone(),
                &list.field,
                "exemptions apply to egress only, and this rule does not cover egress",
            );
        }
        let mut exempt = self.declared_ids(&list.value, "endpoint", "[[endpoints]]", |id| {
            ctx.endpoint_by_id.contains_key(id)
        });
        exempt.sort();
        exempt
    }

    /// A rule's `[rules.node]` table: what a node must prove before it may hold the data;
    /// only meaningful for a rule that covers place or store.
    fn node_requirements(
        &mut self,
        t: &dyn TableLike,
        path: &str,
        actions: u8,
    ) -> NodeRequirements {
        let mut node = NodeRequirements::default();
        let Some((nt, nspan)) = self.get_table(t, path, "node") else {
            return node;
        };
        let npath = join(path, "node");
        self.check_keys(
            nt,
            nspan.clone(),
            &npath,
            &[
                "attestation",
                "max_evidence_age",
                "confidential_computing",
                "min_image_version",
                "facilities",
            ],
        );
        let place_or_store = (1 << Action::Place.index()) | (1 << Action::Store.index());
        if actions & place_or_store == 0 {
            self.err(
                nspan.clone(),
                &npath,
                "node requirements apply to place and store only, and this rule covers neither",
            );
        }
        if let Some(a) = self.get_str(nt, &nspan, &npath, "attestation", false) {
            match AttestationStatus::from_name(&a.value) {
                Some(s) => node.attestation = Some(s),
                None => self.err(a.span, &a.field, format!("unknown attestation status '{}' (expected affirming, warning, none or contraindicated)", a.value)),
            }
        }
        if let Some(a) = self.get_str(nt, &nspan, &npath, "max_evidence_age", false) {
            match parse_duration(&a.value) {
                Some(s) => node.max_evidence_age = Some((s, a.value.clone())),
                None => self.err(
                    a.span,
                    &a.field,
                    format!("'{}' is not a duration (e.g. 90s, 15m, 24h, 7d)", a.value),
                ),
            }
        }
        if let Some(b) = self.get_bool(nt, &npath, "confidential_computing") {
            node.confidential_computing = b.value;
        }
        if let Some(v) = self.get_str(nt, &nspan, &npath, "min_image_version", false) {
            match Version::parse(&v.value) {
                Some(ver) => node.min_image_version = Some((ver, v.value.clone())),
                None => self.err(
                    v.span,
                    &v.field,
                    format!("'{}' is not a dotted numeric version (e.g. 1.4.0)", v.value),
                ),
            }
        }
        if let Some(list) = self.get_str_list(nt, &nspan, &npath, "facilities", false) {
            if list.value.is_empty() {
                self.err(
                    list.span.clone(),
                    &list.field,
                    "rule can never be satisfied: facilities is empty",
                );
            }
            let mut f: Vec<String> = list.value.iter().map(|x| x.value.clone()).collect();
            f.sort();
            f.dedup();
            node.facilities = Some(f);
        }
        node
    }

    /// A rule's `[rules.operator]` table: the clearance an operator needs; only meaningful
    /// for a rule that covers operator-access.
    fn operator_requirements(
        &mut self,
        ctx: &RuleCtx<'_>,
        t: &dyn TableLike,
        path: &str,
        actions: u8,
    ) -> Option<ClearanceRequirement> {
        let (ot, ospan) = self.get_table(t, path, "operator")?;
        let opath = join(path, "operator");
        self.check_keys(ot, ospan.clone(), &opath, &["min_clearance"]);
        if actions & (1 << Action::OperatorAccess.index()) == 0 {
            self.err(ospan.clone(), &opath, "operator requirements apply to operator-access only, and this rule does not cover it");
        }
        let c = self.get_str(ot, &ospan, &opath, "min_clearance", false)?;
        if c.value == "data" {
            Some(ClearanceRequirement::Data)
        } else {
            self.class(ctx, &c).map(ClearanceRequirement::AtLeast)
        }
    }

    /// Builds the (action, classification) index and rejects overlapping rules that disagree.
    fn build_index(
        &mut self,
        rules: &[Rule],
        nclasses: usize,
        classifications: &[String],
        tenants: &[Tenant],
    ) -> Index {
        let cells = Action::ALL.len() * nclasses;
        let mut general: Vec<Vec<u16>> = vec![Vec::new(); cells];
        let mut by_tenant: HashMap<String, Vec<Vec<u16>>> = HashMap::new();
        for (ri, r) in rules.iter().enumerate() {
            for a in Action::ALL {
                if !r.has_action(a) {
                    continue;
                }
                for c in 0..nclasses {
                    if !r.has_class(c) {
                        continue;
                    }
                    let cell = a.index() * nclasses + c;
                    match &r.tenants {
                        None => general[cell].push(ri as u16),
                        Some(ts) => {
                            for tn in ts {
                                by_tenant
                                    .entry(tn.clone())
                                    .or_insert_with(|| vec![Vec::new(); cells])[cell]
                                    .push(ri as u16);
                            }
                        }
                    }
                }
            }
        }
        // Disagreement check, reported once per pair of rules.
        let mut reported: HashSet<(u16, u16)> = HashSet::new();
        let mut conflicts = Vec::new();
        let mut scan = |list: &Vec<u16>, cell: usize, scope: Option<&str>| {
            let action = Action::ALL[cell / nclasses.max(1)];
            let class = &classifications[cell % nclasses.max(1)];
            for x in 0..list.len() {
                for y in (x + 1)..list.len() {
                    let (a, b) = (&rules[list[x] as usize], &rules[list[y] as usize]);
                    if !reported.contains(&(list[x], list[y])) {
                        if let Some(what) = disagreement(a, b, action, tenants, scope) {
                            reported.insert((list[x], list[y]));
                            conflicts.push((b.line, format!(
                                "rule '{}' overlaps rule '{}' (line {}) on {} of {} data{} and they disagree on {}: make their classifications, actions or tenants disjoint, or make them identical",
                                b.id, a.id, a.line, action, class,
                                scope.map(|t| format!(" for tenant {t}")).unwrap_or_default(),
                                what
                            )));
                        }
                    }
                }
            }
        };
        for (cell, list) in general.iter().enumerate() {
            scan(list, cell, None);
        }
        let mut tenant_names: Vec<&String> = by_tenant.keys().collect();
        tenant_names.sort();
        for tn in tenant_names {
            for (cell, list) in by_tenant[tn].iter().enumerate() {
                scan(list, cell, Some(tn));
            }
        }
        for (line, msg) in conflicts {
            self.errors.push(LoadError {
                line,
                column: 1,
                field: "rules".to_string(),
                message: msg,
            });
        }
        Index {
            nclasses,
            general,
            by_tenant,
            ..Index::default()
        }
    }
}

struct RuleCtx<'a> {
    class_by_name: &'a HashMap<String, u8>,
    groups: &'a BTreeMap<String, Vec<Jurisdiction>>,
    tenant_by_id: &'a HashMap<String, usize>,
    endpoint_by_id: &'a HashMap<String, usize>,
}

/// Where a rule allows data: what `allow_in` lists, in the forms decisions need.
#[derive(Default)]
struct AllowIn {
    /// The listed places (groups expanded), or anywhere.
    set: JurisdictionSet,
    /// `home` is listed: the tenant's own jurisdiction is allowed too.
    home: bool,
    /// The list as reasons quote it ("nowhere", "anywhere", or the names as written).
    text: String,
}

/// What `[policy]` says about the policy itself.
#[derive(Default)]
struct Header {
    name: String,
    description: String,
    version: u64,
}

/// The endpoint lookups decisions use: position by id, and by host name (a host listed twice
/// is an error reported elsewhere; the first endpoint keeps it).
fn endpoint_lookups(endpoints: &[Endpoint]) -> (HashMap<String, usize>, HashMap<String, usize>) {
    let endpoint_by_id: HashMap<String, usize> = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id.clone(), i))
        .collect();
    let mut endpoint_by_host: HashMap<String, usize> = HashMap::new();
    for (i, e) in endpoints.iter().enumerate() {
        for h in &e.hosts {
            endpoint_by_host.entry(h.clone()).or_insert(i);
        }
    }
    (endpoint_by_id, endpoint_by_host)
}

/// What two rules that both speak for `action` disagree on, if anything. Only the parts that
/// matter for that action are compared (node requirements do not matter for egress, ...).
fn disagreement(
    a: &Rule,
    b: &Rule,
    action: Action,
    tenants: &[Tenant],
    scope: Option<&str>,
) -> Option<&'static str> {
    if a.mode != b.mode {
        return Some("mode");
    }
    // `home` is the same as listing the tenant's home, when the tenant is known.
    let effective = |r: &Rule| -> JurisdictionSet {
        if !r.allow_home || r.allow.is_anywhere() {
            return r.allow.clone();
        }
        match scope.and_then(|t| tenants.iter().find(|x| x.id == t)) {
            Some(t) => {
                JurisdictionSet::from_members(r.allow.members().iter().copied().chain([t.home]))
            }
            None => r.allow.clone(),
        }
    };
    if effective(a) != effective(b) || (scope.is_none() && a.allow_home != b.allow_home) {
        return Some("allowed jurisdictions");
    }
    match action {
        Action::Place | Action::Store => (a.node != b.node).then_some("node requirements"),
        Action::Egress => (a.exempt != b.exempt).then_some("exempt endpoints"),
        Action::OperatorAccess => (a.clearance != b.clearance).then_some("operator clearance"),
    }
}

fn hi_span(lo: &Option<Located<String>>, hi: &Option<Located<String>>) -> Option<Range<usize>> {
    hi.as_ref()
        .and_then(|h| h.span.clone())
        .or_else(|| lo.as_ref().and_then(|l| l.span.clone()))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Group names are lowercase so they can never be mistaken for ISO codes; `home` and `*` are
/// reserved words of `allow_in`.
fn is_group_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "home"
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// For a lowercase word that is a jurisdiction code once uppercased (`in`, `in-ts`).
fn uppercase_hint(s: &str) -> Option<String> {
    let upper = s.to_ascii_uppercase();
    (upper != s && Jurisdiction::parse(&upper).is_ok()).then_some(upper)
}

fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `90s`, `15m`, `24h`, `7d`, or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 's') => (&s[..i], 1),
        (i, 'm') => (&s[..i], 60),
        (i, 'h') => (&s[..i], 3600),
        (i, 'd') => (&s[..i], 86_400),
        _ => (s, 1),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 12 {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Some(90));
        assert_eq!(parse_duration("15m"), Some(900));
        assert_eq!(parse_duration("24h"), Some(86_400));
        assert_eq!(parse_duration("7d"), Some(604_800));
        assert_eq!(parse_duration("120"), Some(120));
        for bad in ["", "h", "1.5h", "-1s", "10x", "1 h", "é"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn host_names() {
        assert!(is_host_name("models.example.org"));
        assert!(!is_host_name("-bad.example"));
        assert!(!is_host_name("a..b"));
        assert!(!is_host_name("a b"));
    }
}
