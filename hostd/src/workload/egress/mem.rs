//! [`MemFirewall`]: the [`Firewall`] of callers' tests, in memory.

use super::*;

/// A call [`MemFirewall`] received, so callers' tests can check what they asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirewallCall {
    /// `create`, with the IPv4 prefixes the set would hold.
    Create { lease: String, cidrs: Vec<Cidr> },
    /// `update`, with the new prefixes.
    Update { lease: String, cidrs: Vec<Cidr> },
    /// `counters`.
    Counters { lease: String },
    /// `remove`.
    Remove { lease: String },
    /// `list`.
    List,
}

/// A firewall in memory for callers' tests: it allocates addresses as the real one does,
/// records every call, returns counters the test sets, and fails a `create` or a `remove` on request.
#[derive(Debug)]
pub struct MemFirewall {
    pool: Ipv4Pool,
    state: Mutex<MemState>,
}

#[derive(Debug, Default)]
struct MemState {
    calls: Vec<FirewallCall>,
    leases: BTreeMap<String, (LeaseNetwork, Vec<Cidr>, Bytes)>,
    fail_create: bool,
    fail_remove: Option<String>,
}

impl MemFirewall {
    /// An empty fake over `pool`.
    pub fn new(pool: Ipv4Pool) -> MemFirewall {
        MemFirewall {
            pool,
            state: Mutex::new(MemState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls so far, oldest first.
    pub fn calls(&self) -> Vec<FirewallCall> {
        self.state().calls.clone()
    }

    /// The prefixes a live lease is allowed.
    pub fn allowed(&self, lease: &str) -> Option<Vec<Cidr>> {
        self.state().leases.get(lease).map(|l| l.1.clone())
    }

    /// Sets what `counters` returns for a live lease.
    pub fn set_counters(&self, lease: &str, bytes: Bytes) {
        if let Some(l) = self.state().leases.get_mut(lease) {
            l.2 = bytes;
        }
    }

    /// Makes every following `create` fail as a failed `ip` command would.
    pub fn fail_creates(&self, fail: bool) {
        self.state().fail_create = fail;
    }

    /// Makes every following `remove` of `lease` fail as a failed `nft` command would (until
    /// called with `None`); the lease's network stays.
    pub fn fail_removes_of(&self, lease: Option<&str>) {
        self.state().fail_remove = lease.map(str::to_owned);
    }

    fn create_now(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> Result<LeaseNetwork, EgressError> {
        let n = Names::of(lease)?;
        let cidrs = allowed_v4(allow);
        let mut st = self.state();
        st.calls.push(FirewallCall::Create {
            lease: lease.to_owned(),
            cidrs: cidrs.clone(),
        });
        if st.fail_create {
            return Err(fake_failure("ip netns add"));
        }
        if st.leases.contains_key(lease) {
            return Err(EgressError::AlreadyExists {
                lease: lease.to_owned(),
            });
        }
        let used = st.leases.values().map(|l| l.0.host_addr).collect();
        let (host_addr, lease_addr) = self.pool.slot(self.pool.allocate(&used)?);
        let net = LeaseNetwork {
            lease: lease.to_owned(),
            netns_path: n.netns_path(),
            netns: n.netns,
            host_if: n.host_if,
            lease_if: LEASE_IF.to_owned(),
            host_addr,
            lease_addr,
            prefix_len: 30,
        };
        st.leases
            .insert(lease.to_owned(), (net.clone(), cidrs, Bytes::default()));
        Ok(net)
    }

    fn update_now(&self, lease: &str, allow: &EgressAllowList) -> Result<(), EgressError> {
        let n = Names::of(lease)?;
        let cidrs = allowed_v4(allow);
        let mut st = self.state();
        st.calls.push(FirewallCall::Update {
            lease: lease.to_owned(),
            cidrs: cidrs.clone(),
        });
        let l = st.leases.get_mut(lease).ok_or(EgressError::NotFound {
            lease: lease.to_owned(),
            what: n.chain_out,
        })?;
        l.1 = cidrs;
        Ok(())
    }

    fn counters_now(&self, lease: &str) -> Result<Bytes, EgressError> {
        let n = Names::of(lease)?;
        let mut st = self.state();
        st.calls.push(FirewallCall::Counters {
            lease: lease.to_owned(),
        });
        st.leases
            .get(lease)
            .map(|l| l.2)
            .ok_or(EgressError::NotFound {
                lease: lease.to_owned(),
                what: n.counter_out,
            })
    }
}

impl Firewall for MemFirewall {
    async fn create(
        &self,
        lease: &str,
        allow: &EgressAllowList,
    ) -> Result<LeaseNetwork, EgressError> {
        self.create_now(lease, allow)
    }

    async fn update(&self, lease: &str, allow: &EgressAllowList) -> Result<(), EgressError> {
        self.update_now(lease, allow)
    }

    async fn counters(&self, lease: &str) -> Result<Bytes, EgressError> {
        self.counters_now(lease)
    }

    async fn remove(&self, lease: &str) -> Result<(), EgressError> {
        validate_lease(lease)?;
        let mut st = self.state();
        st.calls.push(FirewallCall::Remove {
            lease: lease.to_owned(),
        });
        if st.fail_remove.as_deref() == Some(lease) {
            return Err(fake_failure("nft delete table"));
        }
        st.leases.remove(lease);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<ExistingLease>, EgressError> {
        let mut st = self.state();
        st.calls.push(FirewallCall::List);
        Ok(st
            .leases
            .values()
            .map(|(net, _, _)| ExistingLease {
                lease: net.lease.clone(),
                netns: true,
                rules: true,
                network: Some(net.clone()),
            })
            .collect())
    }
}

/// What a failed command would give, for the failures a test asks for.
fn fake_failure(command: &str) -> EgressError {
    EgressError::Command {
        command: command.to_owned(),
        status: "exit status: 1".to_owned(),
        stderr: "fake failure".to_owned(),
    }
}
