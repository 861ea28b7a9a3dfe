//! Tenants: created and suspended by operators.

use super::*;

impl Node {
    pub fn create_tenant(&self, req: NewTenant) -> Result<Tenant, NodeError> {
        req.validate()
            .map_err(|e| NodeError::BadRequest(e.to_string()))?;
        let _w = lock(&self.write);
        if self.tenants.get::<Tenant>(&req.id)?.is_some() {
            return Err(NodeError::Conflict(format!(
                "tenant {} already exists",
                req.id
            )));
        }
        let t = Tenant {
            id: req.id,
            name: req.name,
            jurisdiction: req.jurisdiction,
            contact: req.contact,
            status: TenantStatus::Active,
            created: rfc3339_ms(self.clock.now_ms()),
        };
        self.tenants.put(&t.id, &t)?;
        self.store.flush()?;
        info!(tenant = %t.id, "tenant created");
        Ok(t)
    }

    pub fn tenants(&self) -> Result<Vec<Tenant>, NodeError> {
        Ok(self.tenants.all()?)
    }

    pub fn tenant(&self, id: &str) -> Result<Tenant, NodeError> {
        self.tenants
            .get(id)?
            .ok_or_else(|| NodeError::NotFound(format!("no tenant {id}")))
    }

    /// Refuses new work for a suspended tenant (a lease, a job, an upload): suspension
    /// stops what the tenant would start, while what runs, its downloads, bills and the end
    /// of its leases go on as before.
    pub fn check_tenant_active(&self, id: &str) -> Result<Tenant, NodeError> {
        let tenant = self.tenant(id)?;
        if tenant.status != TenantStatus::Active {
            return Err(NodeError::Conflict(format!("tenant {id} is suspended")));
        }
        Ok(tenant)
    }

    pub fn suspend_tenant(&self, id: &str) -> Result<Tenant, NodeError> {
        let _w = lock(&self.write);
        let mut t = self.tenant(id)?;
        t.status = TenantStatus::Suspended;
        self.tenants.put(id, &t)?;
        self.store.flush()?;
        warn!(tenant = %id, "tenant suspended");
        Ok(t)
    }
}
