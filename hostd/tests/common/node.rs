//! A node over a store in a folder and the simulated GPUs, for the tests and benches that drive
//! `Node` directly (no residency policy: it places nothing).

use hostd::clock::Clock;
use hostd::config::Config;
use hostd::node::Node;
use hostd::residency::Residency;
use hostd::state::Store;
use std::path::Path;

/// The node of `dir`; opening it again reads what an earlier one left, as after a restart.
pub(crate) fn open_node(dir: &Path) -> Node {
    let text = format!(
        "[node]\nname = \"node-1\"\njurisdiction = \"IN-TG\"\nfacility = \"hyd-1\"\n[state]\ndir = \"{}\"\n",
        dir.display()
    );
    let cfg = Config::from_toml(&text, &dir.join("hostd.toml")).unwrap();
    let store = Store::open_stopped(dir).unwrap();
    let signer = attest::note::NoteSigner::from_seed("node-1/usage", &[9; 32]).unwrap();
    let ledger = hostd::ledger::Ledger::open(store.db(), signer).unwrap();
    let lib = hostd::gpu::sim_library_path().unwrap();
    let gpus = hostd::gpu::Gpus::open(Some(&lib)).unwrap();
    Node::open(cfg, Clock::real(), store, ledger, gpus, Residency::none()).unwrap()
}
