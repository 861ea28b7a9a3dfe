//! A node over a store in `dir` and the simulated GPUs (`H100:4,L4:4`), for the node's tests.

use super::*;
use crate::gpu::Gpus;
use crate::ledger::Ledger;
use crate::residency::Residency;
use attest::note::NoteSigner;
use std::path::Path;

/// The node of `dir`, H100s at ₹250/h and L4s at ₹60/h, under no residency policy (it places
/// nothing); reopening it reads what an earlier one left, as after a restart.
pub(super) fn open_node(dir: &Path) -> Node {
    open_with(dir, |_| Residency::none())
}

/// [`open_node`] under the dev node's signed residency policy (docs/policy.md's scenario).
pub(super) fn open_with_dev_policy(dir: &Path) -> Node {
    open_with(dir, |store| {
        let policy = dir.join("policy.toml");
        if !policy.exists() {
            std::fs::write(&policy, crate::dev::DEV_POLICY).unwrap();
            crate::dev::sign_dev_policy(dir).unwrap();
        }
        let authority = dir.join("policy-authority.key.pub");
        Residency::load(&policy, &authority, store).unwrap()
    })
}

fn open_with(dir: &Path, residency: impl FnOnce(&Store) -> Residency) -> Node {
    let text = format!(
        "[node]\nname = \"node-1\"\njurisdiction = \"IN-TG\"\nfacility = \"hyd-1\"\n\
         [state]\ndir = \"{}\"\n[rates]\nH100 = \"250.00\"\nL4 = \"60.00\"\n",
        dir.display()
    );
    let cfg = Config::from_toml(&text, &dir.join("hostd.toml")).unwrap();
    // A reopened store may wait out the previous handle's lock.
    let store = Store::open_stopped(dir).unwrap();
    let signer = NoteSigner::from_seed("node-1/usage", &[9; 32]).unwrap();
    let ledger = Ledger::open(store.db(), signer).unwrap();
    let lib = crate::gpu::sim_library_path().unwrap();
    let gpus = Gpus::open(Some(&lib)).unwrap();
    let residency = residency(&store);
    Node::open(cfg, Clock::real(), store, ledger, gpus, residency).unwrap()
}
