//! Leases: a tenant's exclusive hold on whole GPUs of one model.
//!
//! Allocation is a pure function over the inventory and the live leases so that the
//! exclusivity rule ("never the same GPU to two live leases") can be tested directly; the
//! daemon calls it under one lock and persists the result before answering.

pub use hostd_api::lease::{Lease, LeaseState, LeasedGpu, NewLease};
use std::collections::BTreeSet;

/// A GPU that can be leased: healthy and present in the inventory.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub uuid: String,
    pub model: String,
    pub index: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("a lease needs between 1 and 64 GPUs, not {0}")]
    BadCount(u32),
    #[error("no GPU of model {model} on this node (models here: {available})")]
    UnknownModel { model: String, available: String },
    #[error("only {free} of {total} {model} GPUs are free; {wanted} requested")]
    NotEnough {
        model: String,
        wanted: u32,
        free: usize,
        total: usize,
    },
}

/// Picks `count` free GPUs of `model` (lowest index first, so placement is predictable).
/// `live` are the leases whose GPUs are taken: the caller decides which (the active ones, and
/// ended ones whose jobs still run).
pub fn allocate(
    candidates: &[Candidate],
    live: &[&Lease],
    model: &str,
    count: u32,
) -> Result<Vec<LeasedGpu>, AllocError> {
    if count == 0 || count > 64 {
        return Err(AllocError::BadCount(count));
    }
    let of_model: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.model.eq_ignore_ascii_case(model))
        .collect();
    if of_model.is_empty() {
        let models: BTreeSet<&str> = candidates.iter().map(|c| c.model.as_str()).collect();
        return Err(AllocError::UnknownModel {
            model: model.into(),
            available: models.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    let taken: BTreeSet<&str> = live
        .iter()
        .flat_map(|l| l.gpus.iter().map(|g| g.uuid.as_str()))
        .collect();
    let mut free: Vec<&Candidate> = of_model
        .iter()
        .copied()
        .filter(|c| !taken.contains(c.uuid.as_str()))
        .collect();
    free.sort_by_key(|c| c.index);
    if free.len() < count as usize {
        return Err(AllocError::NotEnough {
            model: model.into(),
            wanted: count,
            free: free.len(),
            total: of_model.len(),
        });
    }
    Ok(free
        .into_iter()
        .take(count as usize)
        .map(|c| LeasedGpu {
            uuid: c.uuid.clone(),
            model: c.model.clone(),
            index: c.index,
            fault: None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Vec<Candidate> {
        (0..4)
            .map(|i| Candidate {
                uuid: format!("GPU-{i}"),
                model: if i < 2 { "H100" } else { "L4" }.into(),
                index: i,
            })
            .collect()
    }

    fn lease(gpus: &[LeasedGpu], state: LeaseState) -> Lease {
        Lease {
            id: "l".into(),
            tenant: "t".into(),
            model: "H100".into(),
            gpus: gpus.to_vec(),
            classification: "public".into(),
            dataset: None,
            state,
            started_ms: 0,
            ended_ms: None,
            started: String::new(),
            ended: None,
            rate_paise_per_hour: 0,
            policy_digest: String::new(),
            decision: vec![],
        }
    }

    #[test]
    fn allocates_free_gpus_exclusively() {
        let f = fleet();
        let a = allocate(&f, &[], "h100", 1).unwrap();
        assert_eq!(a[0].uuid, "GPU-0");
        let la = lease(&a, LeaseState::Active);
        let b = allocate(&f, &[&la], "H100", 1).unwrap();
        assert_eq!(b[0].uuid, "GPU-1");
        let lb = lease(&b, LeaseState::Active);
        let err = allocate(&f, &[&la, &lb], "H100", 1).unwrap_err();
        assert!(matches!(
            err,
            AllocError::NotEnough {
                free: 0,
                total: 2,
                ..
            }
        ));
        // A lease the caller no longer counts as holding frees its GPU.
        assert_eq!(allocate(&f, &[&lb], "H100", 1).unwrap()[0].uuid, "GPU-0");
    }

    #[test]
    fn explains_bad_requests() {
        let f = fleet();
        assert_eq!(allocate(&f, &[], "H100", 0), Err(AllocError::BadCount(0)));
        let e = allocate(&f, &[], "A100", 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no GPU of model A100 on this node (models here: H100, L4)"
        );
    }
}
