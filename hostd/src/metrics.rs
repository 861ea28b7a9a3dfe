//! Prometheus text exposition for `/metrics`.
//!
//! GPU gauges use dcgm-exporter's names and labels (`DCGM_FI_DEV_GPU_UTIL{gpu, UUID, device,
//! modelName, Hostname}`) so existing Grafana dashboards work unchanged; hostd adds `tenant`
//! and `lease` labels for leased GPUs, and its own `hostd_*` series.
//!
//! [`render`] gathers what the node knows; the text itself is written by pure functions over
//! that data, so the format is tested without a node.

use crate::gpu::{GpuInfo, GpuSample};
use crate::lease::Lease;
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
/// that look like zeros; a lease table that cannot be read as `hostd_lease_table_up 0`, with
/// no `hostd_leases_active` row rather than a false 0.
pub fn render(node: &Node) -> String {
    let host = esc(&node.config().node.name);
    let readable = node.active_leases_if_readable();
    let active = readable.as_ref().map(|l| l.len() as u64);
    let leases = readable.unwrap_or_default();
    // An inventory that cannot be read is said as such, not as a node without GPUs.
    let inventory = node.inventory();
    let inventory_up = u64::from(inventory.is_ok());
    let scrapes: Vec<GpuScrape> = inventory
        .unwrap_or_default()
        .into_iter()
        .map(|info| GpuScrape {
            labels: gpu_labels(&info, holder(&leases, &info.uuid), &host),
            sample: node.gpus().sample(&info.uuid).ok(),
            info,
        })
        .collect();
    let mut out = render_gpus(&scrapes);
    render_counters(&mut out, &host, &node_counters(node, active, inventory_up));
    out
}

/// One GPU at this scrape: its inventory, its labels, and its sample if NVML answered.
struct GpuScrape {
    info: GpuInfo,
    labels: String,
    sample: Option<GpuSample>,
}

/// A dcgm-exporter series: name, type, help, and its value from one GPU's sample (`None`
/// where the GPU does not report it, so the series has no row rather than a false zero).
struct GpuFamily {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&GpuInfo, &GpuSample) -> Option<String>,
}

const MIB: u64 = 1024 * 1024;

const GPU_FAMILIES: [GpuFamily; 6] = [
    GpuFamily {
        name: "DCGM_FI_DEV_GPU_UTIL",
        kind: "gauge",
        help: "GPU utilization (in %).",
        value: |_, s| Some(s.utilization_pct.to_string()),
    },
    GpuFamily {
        name: "DCGM_FI_DEV_FB_USED",
        kind: "gauge",
        help: "Framebuffer memory used (in MiB).",
        value: |_, s| Some((s.memory_used_bytes / MIB).to_string()),
    },
    GpuFamily {
        name: "DCGM_FI_DEV_FB_FREE",
        kind: "gauge",
        help: "Framebuffer memory free (in MiB).",
        value: |g, s| {
            let free = g.memory_total_bytes.saturating_sub(s.memory_used_bytes);
            Some((free / MIB).to_string())
        },
    },
    GpuFamily {
        name: "DCGM_FI_DEV_POWER_USAGE",
        kind: "gauge",
        help: "Power draw (in W).",
        value: |_, s| {
            s.power_mw
                .map(|mw| format!("{:.3}", f64::from(mw) / 1000.0))
        },
    },
    GpuFamily {
        name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        kind: "counter",
        help: "Total energy consumption since boot (in mJ).",
        value: |_, s| s.total_energy_mj.map(|mj| mj.to_string()),
    },
    GpuFamily {
        name: "DCGM_FI_DEV_GPU_TEMP",
        kind: "gauge",
        help: "GPU temperature (in C).",
        value: |_, s| s.temperature_c.map(|t| t.to_string()),
    },
];

/// dcgm-exporter's labels for a GPU, with `tenant` and `lease` where a lease holds it.
fn gpu_labels(g: &GpuInfo, lease: Option<&Lease>, host: &str) -> String {
    let mut labels = format!(
        "gpu=\"{}\",UUID=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\"",
        g.index,
        esc(&g.uuid),
        g.minor_number.unwrap_or(g.index),
        esc(&g.name),
        host
    );
    if let Some(l) = lease {
        let _ = write!(
            labels,
            ",tenant=\"{}\",lease=\"{}\"",
            esc(&l.tenant),
            esc(&l.id)
        );
    }
    labels
}

/// The GPU series, each family's rows together, then `hostd_gpu_up` for every GPU.
fn render_gpus(gpus: &[GpuScrape]) -> String {
    let mut out = String::new();
    for family in &GPU_FAMILIES {
        let (name, kind, help) = (family.name, family.kind, family.help);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for g in gpus {
            let Some(sample) = &g.sample else { continue };
            if let Some(v) = (family.value)(&g.info, sample) {
                let _ = writeln!(out, "{name}{{{}}} {v}", g.labels);
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP hostd_gpu_up Whether the GPU answered NVML at this scrape.\n\
         # TYPE hostd_gpu_up gauge"
    );
    for g in gpus {
        let up = u8::from(g.sample.is_some());
        let _ = writeln!(out, "hostd_gpu_up{{{}}} {up}", g.labels);
    }
    out
}

/// One of hostd's own series: name, type, help, value (`None`: no row, the value is not known
/// at this scrape).
type Counter = (&'static str, &'static str, &'static str, Option<u64>);

/// hostd's own series: the GPU inventory's and the lease table's state, active leases (`None`
/// when the lease table cannot be read), the ledger, and the meter's counters since start.
fn node_counters(node: &Node, active: Option<u64>, inventory_up: u64) -> [Counter; 9] {
    let st = &node.stats;
    let load = |c: &std::sync::atomic::AtomicU64| Some(c.load(Ordering::Relaxed));
    [
        (
            "hostd_gpu_inventory_up",
            "gauge",
            "Whether NVML could enumerate the GPUs at this scrape.",
            Some(inventory_up),
        ),
        (
            "hostd_lease_table_up",
            "gauge",
            "Whether the store could list the leases at this scrape.",
            Some(u64::from(active.is_some())),
        ),
        ("hostd_leases_active", "gauge", "Active leases.", active),
        (
            "hostd_ledger_records",
            "gauge",
            "Records in the signed usage log.",
            Some(node.with_ledger(|l| l.size())),
        ),
        (
            "hostd_meter_ticks_total",
            "counter",
            "Metering rounds.",
            load(&st.ticks),
        ),
        (
            "hostd_meter_samples_total",
            "counter",
            "GPU samples taken.",
            load(&st.samples),
        ),
        (
            "hostd_meter_sample_errors_total",
            "counter",
            "GPU samples that failed.",
            load(&st.sample_errors),
        ),
        (
            "hostd_meter_energy_anomalies_total",
            "counter",
            "Energy counters seen going backwards.",
            load(&st.energy_anomalies),
        ),
        (
            "hostd_usage_records_total",
            "counter",
            "Usage records appended since start.",
            load(&st.records),
        ),
    ]
}

fn render_counters(out: &mut String, host: &str, counters: &[Counter]) {
    for (name, kind, help, v) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        if let Some(v) = v {
            let _ = writeln!(out, "{name}{{Hostname=\"{host}\"}} {v}");
        }
    }
}

#[cfg(test)]
mod tests;
