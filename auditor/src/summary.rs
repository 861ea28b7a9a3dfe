//! The human summary of a valid verification report, as `sovctl audit verify` prints it.

use crate::check::TenantTotals;
use crate::money::{format_gpu_hours, format_inr, format_kwh};
use crate::ser::b64;
use crate::verify::{PreviousCheck, VerifyReport};
use std::collections::BTreeMap;

/// The human summary of a valid report.
pub fn format_summary(r: &VerifyReport) -> String {
    let mut s = header(r);
    let rows = tenant_rows(&r.totals.tenants);
    if !rows.is_empty() {
        s.push_str(&table(
            ["tenant", "records", "GPU-hours", "energy kWh", "amount"],
            &rows,
        ));
    }
    s
}

/// What was verified against what: the checkpoint, the key, the previous checkpoint, the
/// receipts, and the records by kind.
fn header(r: &VerifyReport) -> String {
    let cp = &r.checkpoint;
    let mut s = format!(
        "OK: {} records verified against the checkpoint of {} (size {}, root {})\n",
        r.records,
        cp.origin,
        cp.size,
        b64(&cp.root)
    );
    let pinned = if r.key_pinned {
        " (pinned)"
    } else {
        " (self-asserted)"
    };
    s.push_str(&format!("key: {}{pinned}\n", r.vkey));
    match &r.previous {
        Some(PreviousCheck::ProofVerified { old_size }) => s.push_str(&format!(
            "extends the previous checkpoint of size {old_size} (consistency proof verified)\n"
        )),
        Some(PreviousCheck::Recomputed { old_size }) => s.push_str(&format!(
            "extends the previous checkpoint of size {old_size} (root recomputed from the records)\n"
        )),
        None => {}
    }
    if r.receipts_verified > 0 {
        s.push_str(&format!("receipts verified: {}\n", r.receipts_verified));
    }
    let kinds: Vec<String> = r
        .totals
        .by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let kinds = if kinds.is_empty() {
        "none".to_owned()
    } else {
        kinds.join(", ")
    };
    s.push_str(&format!("by kind: {kinds}\n"));
    s
}

/// One row per tenant, and a TOTAL row where there is more than one tenant.
fn tenant_rows(tenants: &BTreeMap<String, TenantTotals>) -> Vec<[String; 5]> {
    let row = |name: String, v: &TenantTotals| {
        [
            name,
            v.records.to_string(),
            format_gpu_hours(v.gpu_ms),
            format_kwh(v.energy_joules),
            format_inr(v.amount_paise),
        ]
    };
    let mut rows: Vec<[String; 5]> = tenants.iter().map(|(t, v)| row(t.clone(), v)).collect();
    if rows.len() > 1 {
        let sum = tenants.values().fold(TenantTotals::default(), |mut a, v| {
            a.records += v.records;
            a.gpu_ms += v.gpu_ms;
            a.energy_joules += v.energy_joules;
            a.amount_paise += v.amount_paise;
            a
        });
        rows.push(row("TOTAL".into(), &sum));
    }
    rows
}

/// A plain-text table: the first column left-aligned, the figures right-aligned, two spaces
/// between columns, widths in characters (tenant names and ₹ amounts are not ASCII-only).
fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            let pad = " ".repeat(w - c.chars().count());
            if i == 0 {
                l.push_str(c);
                l.push_str(&pad);
            } else {
                l.push_str("  ");
                l.push_str(&pad);
                l.push_str(c);
            }
        }
        l.push('\n');
        l
    };
    let mut s = line(&header.map(String::from));
    for row in rows {
        s.push_str(&line(row));
    }
    s
}

#[cfg(test)]
mod tests;
