use super::*;

fn gpu(index: u32, uuid: &str) -> GpuInfo {
    serde_json::from_value(serde_json::json!({
        "index": index,
        "uuid": uuid,
        "name": "NVIDIA H100 80GB HBM3",
        "model": "H100",
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x1b + index),
        "minor_number": index + 4,
        "memory_total_bytes": 80u64 << 30,
        "driver_version": "550.54.15",
    }))
    .expect("a GpuInfo")
}

fn sample(uuid: &str, power_mw: Option<u32>) -> GpuSample {
    GpuSample {
        uuid: uuid.into(),
        utilization_pct: 87,
        memory_used_bytes: 3 << 30,
        total_energy_mj: Some(123_456),
        power_mw,
        temperature_c: None,
        processes: Vec::new(),
    }
}

fn lease(id: &str, tenant: &str) -> Lease {
    serde_json::from_value(serde_json::json!({
        "id": id, "tenant": tenant, "model": "H100", "gpus": [], "classification": "public",
        "state": "active", "started_ms": 0, "started": "1970-01-01T00:00:00.000Z",
        "rate_paise_per_hour": 25_000, "policy_digest": "sha256:00",
    }))
    .expect("a Lease")
}

fn scrape(info: GpuInfo, lease: Option<&Lease>, sample: Option<GpuSample>) -> GpuScrape {
    GpuScrape {
        // `render` escapes the host name once, for every series.
        labels: gpu_labels(&info, lease, &esc("node-\"1\"")),
        info,
        sample,
    }
}

fn rows<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .collect()
}

#[test]
fn labels_follow_dcgm_exporter_and_name_the_lease_holding_the_gpu() {
    let held = lease("L-1", "hyd\\speech");
    let labels = gpu_labels(&gpu(1, "GPU-b"), Some(&held), "n");
    assert_eq!(
        labels,
        "gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia5\",modelName=\"NVIDIA H100 80GB HBM3\",\
         Hostname=\"n\",tenant=\"hyd\\\\speech\",lease=\"L-1\""
    );
    assert!(!gpu_labels(&gpu(0, "GPU-a"), None, "n").contains("tenant"));
}

#[test]
fn each_family_has_help_type_and_one_row_per_answering_gpu() {
    let text = render_gpus(&[
        scrape(gpu(0, "GPU-a"), None, Some(sample("GPU-a", Some(312_500)))),
        scrape(gpu(1, "GPU-b"), None, Some(sample("GPU-b", None))),
    ]);
    for family in &GPU_FAMILIES {
        assert!(text.contains(&format!("# HELP {} {}\n", family.name, family.help)));
        assert!(text.contains(&format!("# TYPE {} {}\n", family.name, family.kind)));
    }
    let util = rows(&text, "DCGM_FI_DEV_GPU_UTIL");
    assert_eq!(util.len(), 2);
    assert!(util[0].ends_with("} 87"), "{}", util[0]);
    assert!(rows(&text, "DCGM_FI_DEV_FB_USED")[0].ends_with("} 3072"));
    assert!(rows(&text, "DCGM_FI_DEV_FB_FREE")[0].ends_with(&format!("}} {}", 77 * 1024)));
    assert!(rows(&text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[1].ends_with("} 123456"));
    // A value the GPU does not report has no row, rather than a zero that looks measured.
    assert_eq!(
        rows(&text, "DCGM_FI_DEV_POWER_USAGE"),
        [
            "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia4\",\
         modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-\\\"1\\\"\"} 312.500"
        ]
    );
    assert!(rows(&text, "DCGM_FI_DEV_GPU_TEMP").is_empty());
}

#[test]
fn a_gpu_that_did_not_answer_is_down_and_has_no_readings() {
    let text = render_gpus(&[
        scrape(gpu(0, "GPU-a"), None, Some(sample("GPU-a", None))),
        scrape(gpu(1, "GPU-b"), None, None),
    ]);
    let up = rows(&text, "hostd_gpu_up");
    assert_eq!(up.len(), 2);
    assert!(up[0].contains("GPU-a") && up[0].ends_with("} 1"));
    assert!(up[1].contains("GPU-b") && up[1].ends_with("} 0"));
    assert!(!text
        .lines()
        .any(|l| l.starts_with("DCGM") && l.contains("GPU-b")));
}

#[test]
fn counters_carry_the_host_label() {
    let mut out = String::new();
    render_counters(
        &mut out,
        "n1",
        &[("hostd_leases_active", "gauge", "Active leases.", Some(3))],
    );
    assert_eq!(
        out,
        "# HELP hostd_leases_active Active leases.\n# TYPE hostd_leases_active gauge\n\
         hostd_leases_active{Hostname=\"n1\"} 3\n"
    );
}

#[test]
fn a_counter_not_known_at_this_scrape_has_no_row_rather_than_a_false_zero() {
    let mut out = String::new();
    render_counters(
        &mut out,
        "n1",
        &[
            ("hostd_lease_table_up", "gauge", "Lease table.", Some(0)),
            ("hostd_leases_active", "gauge", "Active leases.", None),
        ],
    );
    assert!(
        out.contains("hostd_lease_table_up{Hostname=\"n1\"} 0\n"),
        "{out}"
    );
    assert!(out.contains("# TYPE hostd_leases_active gauge\n"), "{out}");
    assert!(!out.contains("hostd_leases_active{"), "{out}");
}
