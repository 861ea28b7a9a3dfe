//! Tenants: the organisations that rent GPUs. A tenant's id is the last segment of its
//! client certificate's SPIFFE URI (`spiffe://<td>/tenant/<id>`), which is how the API
//! knows whose leases a request may see.

use serde::{Deserialize, Serialize};

/// Whether a tenant may place new leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantStatus {
    /// May lease GPUs.
    Active,
    /// May not lease GPUs; its records and bills stay readable.
    Suspended,
}

impl TenantStatus {
    /// The word the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Active => "active",
            TenantStatus::Suspended => "suspended",
        }
    }
}

/// A tenant as the API shows it (`GET /v1/tenants`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// The tenant's id: the last segment of its client certificate's SPIFFE URI, and the
    /// `tenant` of its leases and usage records.
    pub id: String,
    /// Display name of the organisation.
    pub name: String,
    /// ISO 3166 code of the tenant's home jurisdiction.
    pub jurisdiction: String,
    /// Free-text contact (e.g. an e-mail address); may be empty.
    pub contact: String,
    /// Whether it may place new leases.
    pub status: TenantStatus,
    /// RFC 3339 creation time.
    pub created: String,
}

/// `POST /v1/tenants` body.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// The tenant's id ([`validate_id`]); the client certificates issued to it carry it as
    /// the last segment of their SPIFFE URI.
    pub id: String,
    /// Display name: not blank, at most 200 bytes of UTF-8.
    pub name: String,
    /// ISO 3166 code of its home jurisdiction, e.g. `IN` or `IN-TG`
    /// ([`validate_jurisdiction`]); residency policy rules refer to it.
    pub jurisdiction: String,
    /// Free-text contact, at most 200 bytes of UTF-8; empty when absent.
    #[serde(default)]
    pub contact: String,
}

/// Why a tenant's fields, or an id, were refused. The message is a sentence for the client
/// that sent them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// An id outside the safe alphabet or length.
    #[error(
        "{kind} id `{id}` must be 1-64 characters of a-z 0-9 - _ and start with a letter or digit"
    )]
    Id {
        /// What the id names: `tenant`, `lease`, `job`.
        kind: &'static str,
        /// The id as given.
        id: String,
    },
    /// Not shaped as an ISO 3166 code.
    #[error("jurisdiction `{code}` is not an ISO 3166 code such as IN or IN-TG")]
    Jurisdiction {
        /// The code as given.
        code: String,
    },
    /// A blank name, or one over 200 bytes.
    #[error("tenant name must be 1-200 characters")]
    Name,
    /// A contact over 200 bytes.
    #[error("contact must be at most 200 characters")]
    Contact,
}

/// Ids appear in certificate URIs, sled keys and log lines: keep them to a safe alphabet.
pub fn validate_id(kind: &'static str, id: &str) -> Result<(), Invalid> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && id.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(Invalid::Id {
            kind,
            id: id.to_owned(),
        })
    }
}

/// ISO 3166-1 alpha-2 (`IN`) or ISO 3166-2 (`IN-TG`) shape. The policy engine validates
/// codes against its tables; this only keeps junk out of the store.
pub fn validate_jurisdiction(code: &str) -> Result<(), Invalid> {
    let (cc, sub) = match code.split_once('-') {
        Some((c, s)) => (c, Some(s)),
        None => (code, None),
    };
    let cc_ok = cc.len() == 2 && cc.bytes().all(|b| b.is_ascii_uppercase());
    let sub_ok = sub.is_none_or(|s| {
        (1..=3).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    });
    if cc_ok && sub_ok {
        Ok(())
    } else {
        Err(Invalid::Jurisdiction {
            code: code.to_owned(),
        })
    }
}

impl NewTenant {
    /// Checks the body's shape before it is stored: a valid id and jurisdiction, a non-blank
    /// name and a contact of at most 200 bytes each.
    pub fn validate(&self) -> Result<(), Invalid> {
        validate_id("tenant", &self.id)?;
        if self.name.trim().is_empty() || self.name.len() > 200 {
            return Err(Invalid::Name);
        }
        validate_jurisdiction(&self.jurisdiction)?;
        if self.contact.len() > 200 {
            return Err(Invalid::Contact);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_jurisdictions_are_checked() {
        assert!(validate_id("tenant", "hyd-speech").is_ok());
        for bad in ["", "Hyd", "-x", "a b", "a/b", &"x".repeat(65)] {
            assert!(validate_id("tenant", bad).is_err(), "{bad}");
        }
        for good in ["IN", "IN-TG", "DE-BY", "GB-ENG"] {
            assert!(validate_jurisdiction(good).is_ok(), "{good}");
        }
        for bad in ["in", "IND", "IN-", "IN-TGXX", "I-N"] {
            assert!(validate_jurisdiction(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_refused_tenant_says_which_field_and_why() {
        let tenant = |id: &str, name: &str, jurisdiction: &str, contact: &str| NewTenant {
            id: id.into(),
            name: name.into(),
            jurisdiction: jurisdiction.into(),
            contact: contact.into(),
        };
        assert_eq!(tenant("hyd", "Hyd Speech", "IN-TG", "").validate(), Ok(()));
        assert_eq!(
            tenant("Hyd", "Hyd Speech", "IN-TG", "").validate(),
            Err(Invalid::Id {
                kind: "tenant",
                id: "Hyd".into()
            })
        );
        assert_eq!(
            tenant("hyd", " ", "IN-TG", "").validate(),
            Err(Invalid::Name)
        );
        let e = tenant("hyd", "Hyd Speech", "india", "")
            .validate()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "jurisdiction `india` is not an ISO 3166 code such as IN or IN-TG"
        );
        assert_eq!(
            tenant("hyd", "Hyd Speech", "IN", &"x".repeat(201)).validate(),
            Err(Invalid::Contact)
        );
    }
}
