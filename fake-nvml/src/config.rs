//! The simulation's configuration: environment variables read at `nvmlInit`, and the control
//! file re-read while running.
//!
//! Environment variables are the only channel a program loading a real `libnvidia-ml.so` can
//! configure a drop-in replacement through without code changes, which is the point: hostd runs
//! the very same NVML code path against this library and against a real driver.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

use crate::model::{self, Model};

/// Fleet served when `NVML_SIM_GPUS` is unset: a mixed node like the seed example's.
pub const DEFAULT_GPUS: &str = "H100:4,L4:4";
/// Driver version reported when `NVML_SIM_DRIVER` is unset.
pub const DEFAULT_DRIVER: &str = "550.90.07";
/// Seed for UUIDs and serials when `NVML_SIM_SEED` is unset.
pub const DEFAULT_SEED: &str = "sovereign-host-sim";
/// The most GPUs one simulated node may have (real nodes top out at 16).
pub const MAX_GPUS: usize = 64;

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Confidential-computing mode of the simulated system (`NVML_SIM_CC`, or `"cc"` in the
/// control file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CcMode {
    Off,
    On,
    /// CC on with developer tools enabled (not a production setting).
    DevTools,
}

/// The simulated clock: `virtual = epoch + (real - epoch) * scale`, in Unix milliseconds.
///
/// hostd's accelerated dev clock uses the same formula with the same inputs, so both sides
/// agree on how much (virtual) time passed and energy lines up with metered time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimClock {
    pub epoch_ms: i64,
    pub scale: f64,
}

impl SimClock {
    pub const REAL: SimClock = SimClock {
        epoch_ms: 0,
        scale: 1.0,
    };

    /// Parses `<epoch_unix_ms>:<scale>`; the scale must be finite and positive.
    pub fn parse(s: &str) -> Result<SimClock, ConfigError> {
        let bad = |why: &str| {
            ConfigError(format!(
                "NVML_SIM_CLOCK={s:?}: {why}; expected <epoch_unix_ms>:<scale>, e.g. 1764748800000:3600"
            ))
        };
        let (epoch, scale) = s.trim().split_once(':').ok_or_else(|| bad("no ':'"))?;
        let epoch_ms: i64 = epoch
            .trim()
            .parse()
            .map_err(|_| bad("the epoch is not an integer"))?;
        let scale: f64 = scale
            .trim()
            .parse()
            .map_err(|_| bad("the scale is not a number"))?;
        if !scale.is_finite() || scale <= 0.0 {
            return Err(bad("the scale must be a positive number"));
        }
        Ok(SimClock { epoch_ms, scale })
    }

    /// Virtual time at real time `real_ms`; identical arithmetic to hostd's `Clock`.
    pub fn virtual_ms(&self, real_ms: i64) -> i64 {
        if self.scale == 1.0 {
            return real_ms;
        }
        let elapsed = (real_ms - self.epoch_ms) as f64 * self.scale;
        self.epoch_ms + elapsed as i64
    }
}

/// Everything read from the environment at initialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub gpus: Vec<&'static Model>,
    pub seed: String,
    pub driver_version: String,
    pub clock: SimClock,
    pub cc: CcMode,
    pub control_path: Option<PathBuf>,
}

/// Parses an `NVML_SIM_GPUS` value such as `H100:4,L4:4` (a bare `H100` means one).
/// An empty value or `none` is a node without GPUs.
pub fn parse_gpus(spec: &str) -> Result<Vec<&'static Model>, ConfigError> {
    let spec = spec.trim();
    if spec.is_empty() || spec.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let known = || {
        model::MODELS
            .iter()
            .map(|m| m.key)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut gpus = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (key, count) = match part.split_once(':') {
            Some((k, n)) => {
                let n: usize = n.trim().parse().map_err(|_| {
                    ConfigError(format!(
                        "NVML_SIM_GPUS: {part:?}: the count is not a whole number"
                    ))
                })?;
                (k.trim(), n)
            }
            None => (part, 1),
        };
        let model = model::lookup(key).ok_or_else(|| {
            ConfigError(format!(
                "NVML_SIM_GPUS: unknown model {key:?}; known models: {}",
                known()
            ))
        })?;
        if gpus.len() + count > MAX_GPUS {
            return Err(ConfigError(format!(
                "NVML_SIM_GPUS: more than {MAX_GPUS} GPUs"
            )));
        }
        gpus.extend(std::iter::repeat_n(model, count));
    }
    Ok(gpus)
}

impl SimConfig {
    /// Builds the configuration from environment variables, read through `var` so that tests
    /// need not touch the process environment.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<SimConfig, ConfigError> {
        let gpus = parse_gpus(&var("NVML_SIM_GPUS").unwrap_or_else(|| DEFAULT_GPUS.into()))?;
        let seed = var("NVML_SIM_SEED").unwrap_or_else(|| DEFAULT_SEED.into());
        let driver_version = match var("NVML_SIM_DRIVER") {
            None => DEFAULT_DRIVER.to_string(),
            Some(d) => {
                let d = d.trim().to_string();
                // The real version buffer is 80 bytes including the terminator.
                if d.is_empty() || d.len() >= 80 || d.contains('\0') {
                    return Err(ConfigError(format!(
                        "NVML_SIM_DRIVER={d:?}: expected a version such as 550.90.07"
                    )));
                }
                d
            }
        };
        let clock = match var("NVML_SIM_CLOCK") {
            None => SimClock::REAL,
            Some(c) => SimClock::parse(&c)?,
        };
        let cc = match var("NVML_SIM_CC").as_deref().map(str::trim) {
            None | Some("off") | Some("") => CcMode::Off,
            Some("on") => CcMode::On,
            Some("devtools") => CcMode::DevTools,
            Some(other) => {
                return Err(ConfigError(format!(
                    "NVML_SIM_CC={other:?}: expected off, on or devtools"
                )))
            }
        };
        if cc != CcMode::Off {
            if let Some(m) = gpus.iter().find(|m| !m.cc_capable) {
                return Err(ConfigError(format!(
                    "NVML_SIM_CC: confidential computing cannot be on with a {} in the fleet",
                    m.name
                )));
            }
        }
        let control_path = var("NVML_SIM_CONTROL")
            .filter(|p| !p.trim().is_empty())
            .map(PathBuf::from);
        Ok(SimConfig {
            gpus,
            seed,
            driver_version,
            clock,
            cc,
            control_path,
        })
    }

    /// Builds the configuration from the process environment.
    pub fn from_env() -> Result<SimConfig, ConfigError> {
        SimConfig::from_vars(|k| std::env::var(k).ok())
    }
}

/// A fault injected on one device through the control file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The GPU fell off the bus: its calls return `NVML_ERROR_GPU_IS_LOST`.
    Lost,
    /// Its calls return `NVML_ERROR_UNKNOWN`.
    Error,
    /// Its energy counter goes backwards (each read lower than the one before).
    EnergyBackwards,
}

/// A fault of the driver itself, injected through the control file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriverFault {
    /// The driver is wedged: system-wide queries (driver version, device count) return
    /// `NVML_ERROR_UNKNOWN`, so the node cannot take its GPU inventory.
    Error,
}

/// The control file: per-device load, faults and processes, keyed by index or UUID.
///
/// ```json
/// {"load": {"0": 85}, "faults": {"2": "lost"}, "processes": {"0": [4242]}}
/// ```
/// Devices not mentioned are idle, healthy and run nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Utilisation in percent (0-100).
    #[serde(default)]
    pub load: BTreeMap<String, u32>,
    #[serde(default)]
    pub faults: BTreeMap<String, Fault>,
    /// Explicit compute processes (PIDs); without them a loaded GPU shows one synthetic process.
    #[serde(default)]
    pub processes: BTreeMap<String, Vec<u32>>,
    /// Confidential-computing mode from now on (`off`, `on`, `devtools`), as if the operator
    /// toggled it and reset the GPUs; absent: the mode `NVML_SIM_CC` set.
    #[serde(default)]
    pub cc: Option<CcMode>,
    /// A fault of the driver as a whole (`{"driver": "error"}`); absent: it answers.
    #[serde(default)]
    pub driver: Option<DriverFault>,
}

impl Control {
    /// Parses and checks a control file's text (loads within 0-100).
    pub fn parse(text: &str) -> Result<Control, ConfigError> {
        let c: Control =
            serde_json::from_str(text).map_err(|e| ConfigError(format!("control file: {e}")))?;
        if let Some((k, v)) = c.load.iter().find(|(_, v)| **v > 100) {
            return Err(ConfigError(format!(
                "control file: load of device {k} is {v}%, above 100%"
            )));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_are_a_mixed_node() {
        let c = SimConfig::from_vars(vars(&[])).unwrap();
        let keys: Vec<_> = c.gpus.iter().map(|m| m.key).collect();
        assert_eq!(
            keys,
            ["H100", "H100", "H100", "H100", "L4", "L4", "L4", "L4"]
        );
        assert_eq!(c.driver_version, DEFAULT_DRIVER);
        assert_eq!(c.clock, SimClock::REAL);
        assert_eq!(c.cc, CcMode::Off);
        assert_eq!(c.control_path, None);
    }

    #[test]
    fn gpu_specs() {
        assert_eq!(parse_gpus("").unwrap().len(), 0);
        assert_eq!(parse_gpus("none").unwrap().len(), 0);
        assert_eq!(parse_gpus("l4").unwrap().len(), 1);
        assert_eq!(parse_gpus(" H100:2 , L4:0 ").unwrap().len(), 2);
        let e = parse_gpus("H100:4,V100:1").unwrap_err();
        assert!(e.0.contains("V100") && e.0.contains("H100, L4"), "{e}");
        assert!(parse_gpus("H100:x").is_err());
        assert!(parse_gpus("H100:-1").is_err());
        assert!(parse_gpus("H100:65").is_err());
        assert!(parse_gpus("H100:64").is_ok());
    }

    #[test]
    fn clock_formula_matches_hostd() {
        let c = SimClock::parse("1000:3600").unwrap();
        assert_eq!(c.virtual_ms(1000), 1000);
        assert_eq!(c.virtual_ms(2000), 1000 + 3_600_000);
        let half = SimClock::parse("0:0.5").unwrap();
        assert_eq!(half.virtual_ms(1000), 500);
        assert_eq!(SimClock::REAL.virtual_ms(123_456), 123_456);
        for bad in [
            "", "1000", "x:1", "1000:0", "1000:-2", "1000:inf", "1000:NaN",
        ] {
            assert!(SimClock::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_errors_are_explained() {
        let e = SimConfig::from_vars(vars(&[("NVML_SIM_CC", "maybe")])).unwrap_err();
        assert!(e.0.contains("NVML_SIM_CC"));
        let e = SimConfig::from_vars(vars(&[("NVML_SIM_CC", "on")])).unwrap_err();
        assert!(e.0.contains("NVIDIA L4"), "{e}");
        let ok = SimConfig::from_vars(vars(&[("NVML_SIM_CC", "on"), ("NVML_SIM_GPUS", "H100:8")]));
        assert_eq!(ok.unwrap().cc, CcMode::On);
        assert!(SimConfig::from_vars(vars(&[("NVML_SIM_DRIVER", "")])).is_err());
        assert!(SimConfig::from_vars(vars(&[("NVML_SIM_CLOCK", "soon")])).is_err());
    }

    #[test]
    fn control_file_parsing() {
        let c = Control::parse(
            r#"{"load": {"0": 85}, "faults": {"2": "lost", "3": "error", "1": "energy-backwards"}}"#,
        )
        .unwrap();
        assert_eq!(c.load.get("0"), Some(&85));
        assert_eq!(c.faults.get("1"), Some(&Fault::EnergyBackwards));
        assert_eq!(Control::parse("{}").unwrap(), Control::default());
        assert!(Control::parse(r#"{"load": {"0": 101}}"#).is_err());
        assert!(Control::parse(r#"{"faults": {"0": "melted"}}"#).is_err());
        assert!(Control::parse(r#"{"lod": {}}"#).is_err());
        assert!(Control::parse("{\"load\": ").is_err());
    }
}
