use super::*;

fn totals(records: u64, gpu_ms: u128, energy_joules: f64, amount_paise: u128) -> TenantTotals {
    TenantTotals {
        records,
        gpu_ms,
        energy_joules,
        amount_paise,
    }
}

#[test]
fn one_tenant_has_no_total_row() {
    let tenants = BTreeMap::from([("hyd-speech".to_owned(), totals(2, 3_600_000, 0.0, 25_000))]);
    let rows = tenant_rows(&tenants);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0], "hyd-speech");
    assert_eq!(rows[0][1], "2");
}

#[test]
fn the_total_row_sums_every_tenant() {
    let tenants = BTreeMap::from([
        ("a".to_owned(), totals(2, 3_600_000, 1_800_000.0, 25_000)),
        ("b".to_owned(), totals(3, 7_200_000, 1_800_000.0, 12_000)),
    ]);
    let rows = tenant_rows(&tenants);
    let want = [
        "TOTAL".to_owned(),
        "5".to_owned(),
        format_gpu_hours(10_800_000),
        format_kwh(3_600_000.0),
        format_inr(37_000u128),
    ];
    assert_eq!(rows[2], want);
}

#[test]
fn the_table_aligns_names_left_and_figures_right_by_characters() {
    let rows = [
        ["hyd".to_owned(), "₹1.00".to_owned()],
        ["vfx-studio".to_owned(), "₹250.00".to_owned()],
    ];
    assert_eq!(
        table(["tenant", "amount"], &rows),
        "tenant       amount\n\
         hyd           ₹1.00\n\
         vfx-studio  ₹250.00\n"
    );
}
