//! Jurisdictions: ISO 3166-1 alpha-2 countries and ISO 3166-2 subdivisions, with containment.
//!
//! Codes are data, not logic, so the officially assigned alpha-2 codes are embedded as a
//! table: a policy that names `UK` (not assigned; the United Kingdom is `GB`) or `XX` is a
//! typo an auditor must see at load time, not a rule that silently never matches.
//!
//! Subdivisions: India's states and union territories are validated exactly against
//! ISO 3166-2:IN (with the codes retired in the 2020 and 2023 newsletters accepted as aliases
//! of their successors, e.g. `IN-TG` = `IN-TS` Telangana); other countries' subdivisions are
//! accepted by shape (`CC-` then 1 to 3 uppercase letters or digits, `CC` assigned).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Officially assigned ISO 3166-1 alpha-2 codes (249), sorted for binary search.
const ISO3166_1: [&str; 249] = [
    "AD", "AE", "AF", "AG", "AI", "AL", "AM", "AO", "AQ", "AR", "AS", "AT", "AU", "AW", "AX", "AZ",
    "BA", "BB", "BD", "BE", "BF", "BG", "BH", "BI", "BJ", "BL", "BM", "BN", "BO", "BQ", "BR", "BS",
    "BT", "BV", "BW", "BY", "BZ", "CA", "CC", "CD", "CF", "CG", "CH", "CI", "CK", "CL", "CM", "CN",
    "CO", "CR", "CU", "CV", "CW", "CX", "CY", "CZ", "DE", "DJ", "DK", "DM", "DO", "DZ", "EC", "EE",
    "EG", "EH", "ER", "ES", "ET", "FI", "FJ", "FK", "FM", "FO", "FR", "GA", "GB", "GD", "GE", "GF",
    "GG", "GH", "GI", "GL", "GM", "GN", "GP", "GQ", "GR", "GS", "GT", "GU", "GW", "GY", "HK", "HM",
    "HN", "HR", "HT", "HU", "ID", "IE", "IL", "IM", "IN", "IO", "IQ", "IR", "IS", "IT", "JE", "JM",
    "JO", "JP", "KE", "KG", "KH", "KI", "KM", "KN", "KP", "KR", "KW", "KY", "KZ", "LA", "LB", "LC",
    "LI", "LK", "LR", "LS", "LT", "LU", "LV", "LY", "MA", "MC", "MD", "ME", "MF", "MG", "MH", "MK",
    "ML", "MM", "MN", "MO", "MP", "MQ", "MR", "MS", "MT", "MU", "MV", "MW", "MX", "MY", "MZ", "NA",
    "NC", "NE", "NF", "NG", "NI", "NL", "NO", "NP", "NR", "NU", "NZ", "OM", "PA", "PE", "PF", "PG",
    "PH", "PK", "PL", "PM", "PN", "PR", "PS", "PT", "PW", "PY", "QA", "RE", "RO", "RS", "RU", "RW",
    "SA", "SB", "SC", "SD", "SE", "SG", "SH", "SI", "SJ", "SK", "SL", "SM", "SN", "SO", "SR", "SS",
    "ST", "SV", "SX", "SY", "SZ", "TC", "TD", "TF", "TG", "TH", "TJ", "TK", "TL", "TM", "TN", "TO",
    "TR", "TT", "TV", "TW", "TZ", "UA", "UG", "UM", "US", "UY", "UZ", "VA", "VC", "VE", "VG", "VI",
    "VN", "VU", "WF", "WS", "YE", "YT", "ZA", "ZM", "ZW",
];

/// ISO 3166-2:IN: 28 states and 8 union territories (current codes), sorted.
const ISO3166_2_IN: [&str; 36] = [
    "AN", "AP", "AR", "AS", "BR", "CG", "CH", "DH", "DL", "GA", "GJ", "HP", "HR", "JH", "JK", "KA",
    "KL", "LA", "LD", "MH", "ML", "MN", "MP", "MZ", "NL", "OD", "PB", "PY", "RJ", "SK", "TN", "TR",
    "TS", "UK", "UP", "WB",
];

/// Retired ISO 3166-2:IN codes still common in deployed systems, mapped to their successors
/// (newsletters 2020-11-24: DD/DN merged into DH; 2023-11-23: CT→CG, OR→OD, TG→TS, UT→UK).
const IN_ALIASES: [(&str, &str); 6] = [
    ("CT", "CG"),
    ("DD", "DH"),
    ("DN", "DH"),
    ("OR", "OD"),
    ("TG", "TS"),
    ("UT", "UK"),
];

/// A country or a country subdivision. Compact and `Copy` so decisions stay allocation-light.
///
/// Containment is the only relation: a country contains all its subdivisions; a subdivision
/// contains only itself. Aliased Indian codes are stored canonically, so `IN-TG` equals `IN-TS`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Jurisdiction {
    country: [u8; 2],
    sub: [u8; 3],
    sub_len: u8,
}

/// Why a string is not a jurisdiction code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JurisdictionError {
    /// Not of the shape `CC` or `CC-XXX`.
    #[error("'{0}' is not a jurisdiction code (expected ISO 3166-1 alpha-2 like IN, or ISO 3166-2 like IN-TS)")]
    Malformed(String),
    /// Shape is right but the country is not an assigned ISO 3166-1 alpha-2 code.
    #[error("'{0}' is not an assigned ISO 3166-1 alpha-2 country code")]
    UnknownCountry(String),
    /// An `IN-..` code that ISO 3166-2:IN does not define.
    #[error("'{0}' is not an ISO 3166-2:IN state or union territory code")]
    UnknownIndianSubdivision(String),
}

impl Jurisdiction {
    /// Parses `CC` or `CC-XXX` (uppercase, as ISO writes them; lowercase is rejected so that
    /// policy group names, which are lowercase, can never be confused with codes).
    pub fn parse(s: &str) -> Result<Self, JurisdictionError> {
        let b = s.as_bytes();
        let malformed = || JurisdictionError::Malformed(s.to_string());
        if b.len() < 2 || !b[0].is_ascii_uppercase() || !b[1].is_ascii_uppercase() {
            return Err(malformed());
        }
        let country = [b[0], b[1]];
        if !is_country(&s[..2]) {
            return Err(JurisdictionError::UnknownCountry(s.to_string()));
        }
        if b.len() == 2 {
            return Ok(Jurisdiction {
                country,
                sub: [0; 3],
                sub_len: 0,
            });
        }
        if b[2] != b'-' || b.len() < 4 || b.len() > 6 {
            return Err(malformed());
        }
        let rest = &b[3..];
        if !rest
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        {
            return Err(malformed());
        }
        let mut sub = [0u8; 3];
        sub[..rest.len()].copy_from_slice(rest);
        let mut sub_len = rest.len() as u8;
        if country == *b"IN" {
            let code = &s[3..];
            let canonical = IN_ALIASES
                .iter()
                .find(|(old, _)| *old == code)
                .map(|(_, new)| *new)
                .unwrap_or(code);
            if ISO3166_2_IN.binary_search(&canonical).is_err() {
                return Err(JurisdictionError::UnknownIndianSubdivision(s.to_string()));
            }
            sub = [0; 3];
            sub[..canonical.len()].copy_from_slice(canonical.as_bytes());
            sub_len = canonical.len() as u8;
        }
        Ok(Jurisdiction {
            country,
            sub,
            sub_len,
        })
    }

    /// The country part (`IN` for `IN-TS`).
    pub fn country(self) -> Jurisdiction {
        Jurisdiction {
            country: self.country,
            sub: [0; 3],
            sub_len: 0,
        }
    }

    /// True for a whole country, false for a subdivision.
    pub fn is_country(self) -> bool {
        self.sub_len == 0
    }

    /// Containment: `IN` contains `IN-TS` and `IN`; `IN-TS` contains only `IN-TS`.
    pub fn contains(self, other: Jurisdiction) -> bool {
        if self.is_country() {
            self.country == other.country
        } else {
            self == other
        }
    }

    fn country_str(&self) -> &str {
        // Always ASCII uppercase by construction.
        std::str::from_utf8(&self.country).unwrap_or("??")
    }

    fn sub_str(&self) -> &str {
        std::str::from_utf8(&self.sub[..self.sub_len as usize]).unwrap_or("?")
    }
}

/// True if `code` is an officially assigned ISO 3166-1 alpha-2 code.
pub fn is_country(code: &str) -> bool {
    ISO3166_1.binary_search(&code).is_ok()
}

impl fmt::Display for Jurisdiction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_country() {
            f.write_str(self.country_str())
        } else {
            write!(f, "{}-{}", self.country_str(), self.sub_str())
        }
    }
}

impl fmt::Debug for Jurisdiction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Jurisdiction({self})")
    }
}

impl std::str::FromStr for Jurisdiction {
    type Err = JurisdictionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Jurisdiction::parse(s)
    }
}

impl Serialize for Jurisdiction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Jurisdiction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Jurisdiction::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A set of jurisdictions as a rule states it: "anywhere", or a list of countries and
/// subdivisions (groups already expanded), matched by containment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JurisdictionSet {
    any: bool,
    members: Vec<Jurisdiction>,
}

impl JurisdictionSet {
    /// The set matching every jurisdiction, including destinations whose jurisdiction the
    /// policy does not know.
    pub fn anywhere() -> Self {
        JurisdictionSet {
            any: true,
            members: Vec::new(),
        }
    }

    /// A set from explicit members; redundant members (a subdivision of a listed country,
    /// duplicates) are dropped so that two sets meaning the same thing compare equal.
    pub fn from_members(members: impl IntoIterator<Item = Jurisdiction>) -> Self {
        let mut v: Vec<Jurisdiction> = members.into_iter().collect();
        v.sort();
        v.dedup();
        let countries: Vec<Jurisdiction> = v.iter().copied().filter(|j| j.is_country()).collect();
        v.retain(|j| j.is_country() || !countries.contains(&j.country()));
        JurisdictionSet {
            any: false,
            members: v,
        }
    }

    /// True if the set matches everything.
    pub fn is_anywhere(&self) -> bool {
        self.any
    }

    /// The explicit members (empty for "anywhere").
    pub fn members(&self) -> &[Jurisdiction] {
        &self.members
    }

    /// Containment test for a known jurisdiction.
    pub fn contains(&self, j: Jurisdiction) -> bool {
        self.any || self.members.iter().any(|m| m.contains(j))
    }

    /// Test for a destination whose jurisdiction may be unknown (`None`): only "anywhere"
    /// admits an unknown place.
    pub fn admits(&self, j: Option<Jurisdiction>) -> bool {
        match j {
            Some(j) => self.contains(j),
            None => self.any,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_and_unique() {
        assert!(ISO3166_1.windows(2).all(|w| w[0] < w[1]));
        assert!(ISO3166_2_IN.windows(2).all(|w| w[0] < w[1]));
        for (_, new) in IN_ALIASES {
            assert!(ISO3166_2_IN.contains(&new));
        }
    }

    #[test]
    fn parses_countries_and_subdivisions() {
        let india = Jurisdiction::parse("IN").unwrap();
        let ts = Jurisdiction::parse("IN-TS").unwrap();
        assert!(india.is_country());
        assert!(!ts.is_country());
        assert_eq!(ts.country(), india);
        assert_eq!(ts.to_string(), "IN-TS");
        assert_eq!(Jurisdiction::parse("DE-BY").unwrap().to_string(), "DE-BY");
        assert_eq!(Jurisdiction::parse("FR-75C").unwrap().to_string(), "FR-75C");
    }

    #[test]
    fn indian_aliases_are_canonical() {
        assert_eq!(
            Jurisdiction::parse("IN-TG").unwrap(),
            Jurisdiction::parse("IN-TS").unwrap()
        );
        assert_eq!(Jurisdiction::parse("IN-OR").unwrap().to_string(), "IN-OD");
    }

    #[test]
    fn rejects_bad_codes() {
        for bad in [
            "", "I", "in", "In", "IN-", "IN-ABCD", "IN_TS", "IN-ts", "IN-TSX ",
        ] {
            assert!(
                matches!(
                    Jurisdiction::parse(bad),
                    Err(JurisdictionError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Jurisdiction::parse("UK"),
            Err(JurisdictionError::UnknownCountry(_))
        ));
        assert!(matches!(
            Jurisdiction::parse("XX-AB"),
            Err(JurisdictionError::UnknownCountry(_))
        ));
        assert!(matches!(
            Jurisdiction::parse("IN-ZZ"),
            Err(JurisdictionError::UnknownIndianSubdivision(_))
        ));
        // Multi-byte input must not split a character.
        assert!(Jurisdiction::parse("INé").is_err());
        assert!(Jurisdiction::parse("ÉÉ").is_err());
    }

    #[test]
    fn containment() {
        let p = |s| Jurisdiction::parse(s).unwrap();
        assert!(p("IN").contains(p("IN-TS")));
        assert!(p("IN").contains(p("IN")));
        assert!(!p("IN-TS").contains(p("IN")));
        assert!(!p("IN-TS").contains(p("IN-KA")));
        assert!(!p("IN").contains(p("SG")));
        let set = JurisdictionSet::from_members([p("IN-TS"), p("IN"), p("DE")]);
        assert_eq!(set.members(), &[p("DE"), p("IN")]);
        assert!(set.contains(p("IN-KA")));
        assert!(!set.admits(None));
        assert!(JurisdictionSet::anywhere().admits(None));
    }
}
