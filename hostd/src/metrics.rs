//! Prometheus text exposition for `/metrics`.
//!
//! GPU gauges use dcgm-exporter's names and labels (`DCGM_FI_DEV_GPU_UTIL{gpu, UUID, device,
//! modelName, Hostname}`) so existing Grafana dashboards work unchanged; hostd adds `tenant`
//! and `lease` labels for leased GPUs, and its own `hostd_*` series.

use crate::node::{holder, Node};
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// Escapes a label value per the exposition format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every metric. Sampling errors are reported as `hostd_gpu_up 0`, never as gaps
/// that look like zeros.
pub fn render(node: &Node) -> String {
    let mut out = String::new();
    let host = esc(&node.config().node.name);
    let leases = node.leases().unwrap_or_default();
    let gpus = node.inventory().unwrap_or_default();
    let families: [(&str, &str, &str); 6] = [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        (
            "DCGM_FI_DEV_FB_USED",
            "gauge",
            "Framebuffer memory used (in MiB).",
        ),
        (
            "DCGM_FI_DEV_FB_FREE",
            "gauge",
            "Framebuffer memory free (in MiB).",
        ),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
        ),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ];
    let mut rows: Vec<Vec<String>> = vec![Vec::new(); families.len()];
    let mut up = Vec::new();
    for g in &gpus {
        let mut labels = format!(
            "gpu=\"{}\",UUID=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\"",
            g.index,
            esc(&g.uuid),
            g.minor_number.unwrap_or(g.index),
            esc(&g.name),
            host
        );
        if let Some(l) = holder(&leases, &g.uuid) {
            let _ = write!(
                labels,
                ",tenant=\"{}\",lease=\"{}\"",
                esc(&l.tenant),
                esc(&l.id)
            );
        }
        match node.gpus().sample(&g.uuid) {
            Ok(s) => {
                up.push(format!("hostd_gpu_up{{{labels}}} 1"));
                let mib = |b: u64| b / (1024 * 1024);
                rows[0].push(format!(
                    "{}{{{labels}}} {}",
                    families[0].0, s.utilization_pct
                ));
                rows[1].push(format!(
                    "{}{{{labels}}} {}",
                    families[1].0,
                    mib(s.memory_used_bytes)
                ));
                rows[2].push(format!(
                    "{}{{{labels}}} {}",
                    families[2].0,
                    mib(g.memory_total_bytes.saturating_sub(s.memory_used_bytes))
                ));
                if let Some(mw) = s.power_mw {
                    rows[3].push(format!(
                        "{}{{{labels}}} {:.3}",
                        families[3].0,
                        f64::from(mw) / 1000.0
                    ));
                }
                if let Some(mj) = s.total_energy_mj {
                    rows[4].push(format!("{}{{{labels}}} {mj}", families[4].0));
                }
                if let Some(t) = s.temperature_c {
                    rows[5].push(format!("{}{{{labels}}} {t}", families[5].0));
                }
            }
            Err(_) => up.push(format!("hostd_gpu_up{{{labels}}} 0")),
        }
    }
    for ((name, kind, help), rows) in families.iter().zip(rows) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for r in rows {
            let _ = writeln!(out, "{r}");
        }
    }
    let _ = writeln!(out, "# HELP hostd_gpu_up Whether the GPU answered NVML at this scrape.\n# TYPE hostd_gpu_up gauge");
    for r in up {
        let _ = writeln!(out, "{r}");
    }
    let active = leases
        .iter()
        .filter(|l| l.state == crate::lease::LeaseState::Active)
        .count();
    let size = node.with_ledger(|l| l.size());
    let st = &node.stats;
    let counters = [
        (
            "hostd_leases_active",
            "gauge",
            "Active leases.",
            active as u64,
        ),
        (
            "hostd_ledger_records",
            "gauge",
            "Records in the signed usage log.",
            size,
        ),
        (
            "hostd_meter_ticks_total",
            "counter",
            "Metering rounds.",
            st.ticks.load(Ordering::Relaxed),
        ),
        (
            "hostd_meter_samples_total",
            "counter",
            "GPU samples taken.",
            st.samples.load(Ordering::Relaxed),
        ),
        (
            "hostd_meter_sample_errors_total",
            "counter",
            "GPU samples that failed.",
            st.sample_errors.load(Ordering::Relaxed),
        ),
        (
            "hostd_meter_energy_anomalies_total",
            "counter",
            "Energy counters seen going backwards.",
            st.energy_anomalies.load(Ordering::Relaxed),
        ),
        (
            "hostd_usage_records_total",
            "counter",
            "Usage records appended since start.",
            st.records.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{Hostname=\"{host}\"}} {v}"
        );
    }
    out
}
