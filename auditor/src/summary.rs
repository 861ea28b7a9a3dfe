//! The human summary of a valid verification report, as `sovctl audit verify` prints it.

use crate::check::TenantTotals;
use crate::money::{format_gpu_hours, format_inr, format_kwh};
use crate::ser::b64;
use crate::verify::{PreviousCheck, VerifyReport};

/// The human summary of a valid report.
pub fn format_summary(r: &VerifyReport) -> String {
    let mut s = String::new();
    let cp = &r.checkpoint;
    s.push_str(&format!(
        "OK: {} records verified against the checkpoint of {} (size {}, root {})\n",
        r.records,
        cp.origin,
        cp.size,
        b64(&cp.root)
    ));
    s.push_str(&format!(
        "key: {}{}\n",
        r.vkey,
        if r.key_pinned {
            " (pinned)"
        } else {
            " (self-asserted)"
        }
    ));
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
    s.push_str(&format!(
        "by kind: {}\n",
        if kinds.is_empty() {
            "none".to_owned()
        } else {
            kinds.join(", ")
        }
    ));
    let header = ["tenant", "records", "GPU-hours", "energy kWh", "amount"];
    let mut rows: Vec<[String; 5]> = r
        .totals
        .tenants
        .iter()
        .map(|(t, v)| {
            [
                t.clone(),
                v.records.to_string(),
                format_gpu_hours(v.gpu_ms),
                format_kwh(v.energy_joules),
                format_inr(v.amount_paise),
            ]
        })
        .collect();
    if rows.len() > 1 {
        let sum = r
            .totals
            .tenants
            .values()
            .fold(TenantTotals::default(), |mut a, v| {
                a.records += v.records;
                a.gpu_ms += v.gpu_ms;
                a.energy_joules += v.energy_joules;
                a.amount_paise += v.amount_paise;
                a
            });
        rows.push([
            "TOTAL".into(),
            sum.records.to_string(),
            format_gpu_hours(sum.gpu_ms),
            format_kwh(sum.energy_joules),
            format_inr(sum.amount_paise),
        ]);
    }
    if !rows.is_empty() {
        let mut widths = header.map(|h| h.chars().count());
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
                let pad = w - c.chars().count();
                if i == 0 {
                    l.push_str(c);
                    l.push_str(&" ".repeat(pad));
                } else {
                    l.push_str("  ");
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                }
            }
            l.push('\n');
            l
        };
        s.push_str(&line(&header.map(String::from)));
        for row in &rows {
            s.push_str(&line(row));
        }
    }
    s
}
