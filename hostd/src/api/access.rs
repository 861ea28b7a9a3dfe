//! What a principal may do, in one place.

use super::*;

/// What a principal may do, in one place.
pub(super) struct Access<'a>(pub(super) &'a Principal);

impl Access<'_> {
    pub(super) fn operator(&self, what: &str) -> ApiResult<()> {
        match self.0.role {
            Role::Operator => Ok(()),
            _ => Err(ApiError::forbidden(self.0, what)),
        }
    }

    pub(super) fn reader(&self, what: &str) -> ApiResult<()> {
        match self.0.role {
            Role::Operator | Role::Auditor => Ok(()),
            Role::Tenant => Err(ApiError::forbidden(self.0, what)),
        }
    }

    /// Operators and auditors see every tenant; a tenant sees itself.
    pub(super) fn sees_tenant(&self, tenant: &str) -> bool {
        match self.0.role {
            Role::Operator | Role::Auditor => true,
            Role::Tenant => self.0.name == tenant,
        }
    }

    /// Operators act for any tenant; a tenant acts for itself; auditors never act.
    pub(super) fn acts_for(&self, tenant: &str, what: &str) -> ApiResult<()> {
        match self.0.role {
            Role::Operator => Ok(()),
            Role::Tenant if self.0.name == tenant => Ok(()),
            _ => Err(ApiError::forbidden(self.0, what)),
        }
    }
}
