//! A GPU that is lost, erroring or reporting nonsense: the lease is marked, the event logged,
//! nothing panics, and nothing bogus is charged.

use crate::{create_tenants, json, lease, wait_for};
use e2e::DevNode;
use serde_json::Value;

fn usage_of(node: &DevNode, gpu: &str) -> Vec<Value> {
    json(&node.sovctl("operator", &["--json", "usage", "list"]))["records"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r["gpu_uuid"] == gpu)
        .collect()
}

fn metric(node: &DevNode, name: &str) -> f64 {
    let (status, body) = node.rt().block_on(async {
        let c = node.client("operator").await.expect("client");
        c.get_bytes("/metrics").await.expect("metrics")
    });
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn lost_gpu_stops_its_metering_and_backwards_energy_is_not_charged() {
    let node = DevNode::start(&["--time-scale", "36000", "--interval", "600"]);
    create_tenants(&node);
    let lease = lease(&node, "operator", "hyd-speech", 2, "H100");
    let id = lease["id"].as_str().unwrap().to_string();
    let lost = lease["gpus"][1]["uuid"].as_str().unwrap().to_string();
    let odd = lease["gpus"][0]["uuid"].as_str().unwrap().to_string();
    wait_for(30, "records for both GPUs", || {
        (usage_of(&node, &lost).len() >= 2 && usage_of(&node, &odd).len() >= 2).then_some(())
    });

    // Inject faults through the simulation's control file.
    let control = node.dir.join("gpu-control.json");
    let faults = format!(r#"{{"faults": {{"{lost}": "lost", "{odd}": "energy-backwards"}}}}"#);
    std::fs::write(&control, faults).unwrap();

    let marked = wait_for(30, "the lease to mark the lost GPU", || {
        let l = json(&node.sovctl("operator", &["--json", "lease", "show", &id]));
        l["gpus"][1]["fault"].as_str().map(str::to_string)
    });
    assert!(marked.contains("lost"), "{marked}");
    let lost_records = usage_of(&node, &lost).len();
    wait_for(30, "energy anomalies to be counted", || {
        (metric(&node, "hostd_meter_energy_anomalies_total") > 0.0).then_some(())
    });
    // Metering of the healthy-but-odd GPU continues, the lost one is frozen.
    let before = usage_of(&node, &odd).len();
    wait_for(30, "metering to continue on the other GPU", || {
        (usage_of(&node, &odd).len() > before + 2).then_some(())
    });
    assert_eq!(
        usage_of(&node, &lost).len(),
        lost_records,
        "no record for a lost GPU"
    );
    // Energy never goes negative or absurd: an H100 draws at most 700 W for an hour (2.52 MJ).
    for r in usage_of(&node, &odd) {
        let j = r["energy_joules"].as_f64().unwrap();
        assert!((0.0..=2_520_001.0).contains(&j), "bogus energy in {r}");
    }
    assert!(
        node.log_text().contains("GPU failed; metering stopped"),
        "event logged"
    );
    assert!(
        node.log_text().contains("energy counter went backwards"),
        "event logged"
    );

    // The lost GPU is never handed out again, and the node is still healthy.
    let gpus = json(&node.sovctl("operator", &["--json", "gpus"]));
    assert!(
        gpus["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["status"]["state"] != "ok" || g["uuid"] == ""),
        "{gpus}"
    );
    let ended = json(&node.sovctl("operator", &["--json", "lease", "end", &id]));
    assert_eq!(ended["lease"]["state"], "ended");
}

/// A driver that does not answer NVML's system queries: the node cannot see its GPUs, and
/// health says so (degraded), rather than "ok" with no GPUs; it is ok again once the driver
/// answers.
#[test]
fn a_driver_that_does_not_answer_degrades_health() {
    let node = DevNode::start(&[]);
    let health = || json(&node.sovctl("operator", &["--json", "health"]));
    let before = health();
    assert_eq!(before["status"], "ok", "{before}");
    assert_eq!(before["gpus"], 8, "{before}");
    let control = node.dir.join("gpu-control.json");
    std::fs::write(&control, r#"{"driver": "error"}"#).unwrap();
    let degraded = wait_for(10, "health to say degraded", || {
        let h = health();
        (h["status"] == "degraded").then_some(h)
    });
    assert!(degraded["gpus"].is_null(), "{degraded}");
    let human = node.sovctl("operator", &["health"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("is up: GPUs unknown"), "{human}");
    assert_eq!(metric(&node, "hostd_gpu_inventory_up"), 0.0);
    assert!(
        degraded["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("GPU inventory cannot be read")),
        "{degraded}"
    );
    std::fs::write(&control, "{}\n").unwrap();
    let after = wait_for(10, "health to be ok again", || {
        let h = health();
        (h["status"] == "ok").then_some(h)
    });
    assert_eq!(after["gpus"], 8, "{after}");
    assert_eq!(metric(&node, "hostd_gpu_inventory_up"), 1.0);
    assert_eq!(metric(&node, "hostd_lease_table_up"), 1.0);
}
