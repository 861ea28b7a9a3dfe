//! The loader reports every error, each with line, column and field, and never panics.

use policy::{LoadError, Policy};

fn errors(text: &str) -> Vec<LoadError> {
    match Policy::from_toml_str(text) {
        Ok(_) => panic!("policy unexpectedly loaded"),
        Err(e) => e,
    }
}

fn has(errs: &[LoadError], line: usize, field: &str, needle: &str) {
    assert!(
        errs.iter()
            .any(|e| e.line == line && e.field == field && e.message.contains(needle)),
        "no error at line {line} field {field} containing {needle:?}; got:\n{}",
        errs.iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn syntax_error_has_a_position() {
    let errs = errors("[policy]\nname = \"x\"\nformat = = 1\n");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].line, 3);
    assert!(errs[0].column > 0);
    assert!(errs[0].message.starts_with("TOML syntax error"));
}

#[test]
fn every_error_is_reported_with_line_and_field() {
    let text = r#"[policy]
name = "bad"
format = 2
version = 0
colour = "red"

[classifications]
order = ["public", "internal", "public"]

[groups]
eu = ["DE", "UK", "fr"]
EU = ["DE"]

[[tenants]]
id = "t1"
home = "IN-ZZ"

[[endpoints]]
id = "a"
jurisdiction = "IN"
cidrs = ["10.0.0.0/8"]

[[endpoints]]
id = "b"
jurisdiction = "SG"
cidrs = ["10.1.0.0/16", "10.2.0.1/16"]

[[rules]]
id = "r1"
actions = ["place", "fly"]
classification = "secret"
allow_in = ["IN", "asia"]

[[rules]]
id = "r2"
actions = []
classification_at_least = "internal"
classification_at_most = "public"
allow_in = ["IN"]

[[rules]]
id = "r3"
actions = ["egress"]
classification = "public"
tenants = ["ghost"]
allow_in = ["*", "IN"]
exempt_endpoints = ["nowhere"]
mode = "maybe"

[rules.node]
attestation = "great"
max_evidence_age = "soon"
min_image_version = "latest"

[[rules]]
id = "r4"
actions = ["place"]
classification = "internal"
allow_in = ["IN"]

[[rules]]
id = "r5"
actions = ["place", "store"]
classifications = ["public", "internal"]
allow_in = ["SG"]
"#;
    let errs = errors(text);
    has(&errs, 3, "policy.format", "unsupported format 2");
    has(&errs, 4, "policy.version", "positive");
    has(&errs, 5, "policy.colour", "unknown field");
    has(&errs, 8, "classifications.order[2]", "listed twice");
    has(&errs, 11, "groups.eu[1]", "the United Kingdom is GB");
    has(&errs, 11, "groups.eu[2]", "codes are uppercase: FR");
    has(&errs, 12, "groups.EU", "group name");
    has(&errs, 16, "tenants[0].home", "ISO 3166-2:IN");
    has(
        &errs,
        23,
        "endpoints[1].cidrs",
        "overlaps 10.0.0.0/8 of endpoint 'a'",
    );
    has(&errs, 26, "endpoints[1].cidrs[1]", "host bits");
    has(&errs, 30, "rules[0].actions[1]", "unknown action 'fly'");
    has(
        &errs,
        31,
        "rules[0].classification",
        "unknown classification 'secret'",
    );
    has(&errs, 32, "rules[0].allow_in[1]", "unknown group 'asia'");
    has(
        &errs,
        36,
        "rules[1].actions",
        "can never match: actions is empty",
    );
    has(
        &errs,
        38,
        "rules[1]",
        "can never match: classification_at_least 'internal' is above",
    );
    has(&errs, 45, "rules[2].tenants[0]", "unknown tenant 'ghost'");
    has(&errs, 46, "rules[2].allow_in", "'*' already means anywhere");
    has(
        &errs,
        47,
        "rules[2].exempt_endpoints[0]",
        "unknown endpoint 'nowhere'",
    );
    has(&errs, 48, "rules[2].mode", "unknown mode 'maybe'");
    has(&errs, 50, "rules[2].node", "apply to place and store only");
    has(
        &errs,
        51,
        "rules[2].node.attestation",
        "unknown attestation status",
    );
    has(
        &errs,
        52,
        "rules[2].node.max_evidence_age",
        "not a duration",
    );
    has(
        &errs,
        53,
        "rules[2].node.min_image_version",
        "not a dotted numeric version",
    );
    has(&errs, 61, "rules", "rule 'r5' overlaps rule 'r4' (line 55) on place of internal data and they disagree on allowed jurisdictions");
    // Sorted by position.
    assert!(errs
        .windows(2)
        .all(|w| (w[0].line == 0, w[0].line) <= (w[1].line == 0, w[1].line)));
    // Rendering carries line, column and field.
    assert!(errs[0].to_string().starts_with("line 3, column "));
}

#[test]
fn missing_sections_and_fields() {
    let errs = errors("");
    assert!(errs
        .iter()
        .any(|e| e.field == "policy" && e.message.contains("missing")));
    assert!(errs.iter().any(|e| e.field == "classifications"));
    let errs = errors(
        "[policy]\nname = \"x\"\nformat = 1\nversion = 1\n[classifications]\norder = [\"a\"]\n[[rules]]\nid = \"r\"\n",
    );
    has(&errs, 7, "rules[0].actions", "missing required field");
    has(&errs, 7, "rules[0].allow_in", "missing required field");
    has(&errs, 7, "rules[0]", "missing classification");
}

#[test]
fn rules_that_can_never_match_or_apply() {
    let head = "[policy]\nname = \"x\"\nformat = 1\nversion = 1\n[classifications]\norder = [\"a\", \"b\"]\n";
    let errs = errors(&format!(
        "{head}[[rules]]\nid = \"r\"\nactions = [\"place\"]\nclassifications = []\nallow_in = [\"IN\"]\nexempt_endpoints = []\n[rules.operator]\nmin_clearance = \"a\"\n"
    ));
    has(&errs, 10, "rules[0].classifications", "can never match");
    has(&errs, 12, "rules[0].exempt_endpoints", "egress only");
    has(&errs, 13, "rules[0].operator", "operator-access only");
    let errs = errors(&format!(
        "{head}[[rules]]\nid = \"r\"\nactions = [\"place\"]\nclassification = \"a\"\ntenants = []\nallow_in = [\"IN\"]\n[rules.node]\nfacilities = []\n"
    ));
    has(&errs, 11, "rules[0].tenants", "can never match");
    has(
        &errs,
        14,
        "rules[0].node.facilities",
        "can never be satisfied",
    );
}

#[test]
fn disagreeing_overlaps_in_mode_requirements_and_exemptions() {
    let head = r#"[policy]
name = "x"
format = 1
version = 1
[classifications]
order = ["a", "b"]
[[endpoints]]
id = "cp"
jurisdiction = "IN"
hosts = ["cp.example"]
"#;
    let conflict = |r1: &str, r2: &str, what: &str| {
        let errs = errors(&format!(
            "{head}[[rules]]\nid = \"one\"\n{r1}\n[[rules]]\nid = \"two\"\n{r2}\n"
        ));
        assert!(
            errs.iter()
                .any(|e| e.message.contains(&format!("disagree on {what}"))),
            "{what}: {errs:?}"
        );
    };
    let base = "classification = \"a\"\nallow_in = [\"IN\"]";
    conflict(
        &format!("actions = [\"place\"]\n{base}"),
        &format!("actions = [\"place\"]\n{base}\nmode = \"audit\""),
        "mode",
    );
    conflict(
        &format!("actions = [\"store\"]\n{base}"),
        &format!("actions = [\"store\"]\n{base}\n[rules.node]\nconfidential_computing = true"),
        "node requirements",
    );
    conflict(
        &format!("actions = [\"egress\"]\n{base}"),
        &format!("actions = [\"egress\"]\n{base}\nexempt_endpoints = [\"cp\"]"),
        "exempt endpoints",
    );
    conflict(
        &format!("actions = [\"operator-access\"]\n{base}"),
        &format!(
            "actions = [\"operator-access\"]\n{base}\n[rules.operator]\nmin_clearance = \"b\""
        ),
        "operator clearance",
    );
    // Node requirements do not matter for egress: these two agree on egress.
    let ok = format!(
        "{head}[[rules]]\nid = \"one\"\nactions = [\"place\", \"egress\"]\n{base}\n[rules.node]\nconfidential_computing = true\n[[rules]]\nid = \"two\"\nactions = [\"egress\"]\n{base}\n"
    );
    assert!(Policy::from_toml_str(&ok).is_ok());
}

#[test]
fn inline_tables_and_arrays_are_accepted() {
    let text = r#"
policy = { name = "inline", format = 1, version = 3 }
classifications = { order = ["public"] }
tenants = [{ id = "t", home = "IN" }]
rules = [{ id = "r", actions = ["place"], classification = "public", allow_in = ["*"], node = { attestation = "warning" } }]
"#;
    let p = Policy::from_toml_str(text).expect("inline form loads");
    assert_eq!(p.version, 3);
    assert_eq!(p.rules[0].line, 5);
}

#[test]
fn wrong_types_are_reported_not_panicked() {
    let errs = errors("policy = 3\nclassifications = []\nrules = 7\ntenants = [1]\n");
    has(&errs, 1, "policy", "expected a table");
    has(&errs, 2, "classifications", "expected a table");
    has(&errs, 3, "rules", "expected an array of tables");
    has(&errs, 4, "tenants[0]", "expected a table");
}

#[test]
fn pathological_inputs_do_not_panic() {
    let mut inputs: Vec<String> = vec![
        "\u{0}".into(),
        "[".repeat(10_000),
        "a = ".to_string() + &"[".repeat(5000),
        "x = \"\u{202e}\"".into(),
        "[policy]\nname = \"é\"\n".into(),
        "[[rules]]\n".repeat(200),
        "[classifications]\norder = [".to_string()
            + &(0..100)
                .map(|i| format!("\"c{i}\""))
                .collect::<Vec<_>>()
                .join(",")
            + "]\n",
    ];
    // Deterministic pseudo-random byte strings.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..200 {
        let len = (x % 300) as usize;
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push((x % 128) as u8);
        }
        inputs.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    for s in &inputs {
        let _ = Policy::from_toml_str(s);
    }
}
