//! Starting and stopping units over systemd's D-Bus API (`org.freedesktop.systemd1`).
//!
//! [`UnitManager`] is the one side-effecting interface of the workload area: the job logic
//! above it is plain code, and tests drive it against a fake systemd that speaks the same
//! D-Bus interface on a private bus. [`Systemd`] is the real adapter, with hand-written zbus
//! proxies for the few calls it makes (types as systemd 252 introspects them).

use super::sandbox::PropertyValue;
use std::future::Future;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

/// Why systemd did not do what was asked. Messages are for the operator's log; clients get a
/// generic answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    #[error("cannot reach systemd's bus at {address}")]
    Connect {
        address: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd refused to start {unit}")]
    StartRefused {
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd refused to stop {unit}")]
    StopRefused {
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("property {name} cannot be sent: {reason}")]
    BadProperty { name: String, reason: String },
    #[error("systemd did not answer {call} for {unit}")]
    Call {
        call: &'static str,
        unit: String,
        #[source]
        source: zbus::Error,
    },
}

/// What systemd says of a unit: its state, how its main process ended, and its accounting.
/// Counters systemd cannot provide (it answers `u64::MAX`) are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitStatus {
    /// `ActiveState`: `activating`, `active`, `deactivating`, `inactive`, `failed`, …
    pub active_state: String,
    /// The service's `Result`: `success`, `exit-code`, `signal`, `timeout`, `oom-kill`, …
    pub result: String,
    /// `ExecMainCode`: 0 not exited yet, 1 exited, 2 killed, 3 dumped core (`CLD_*`).
    pub exec_main_code: i32,
    /// `ExecMainStatus`: the exit status, or the signal number when killed.
    pub exec_main_status: i32,
    /// `CPUUsageNSec`.
    pub cpu_ns: Option<u64>,
    /// `MemoryCurrent`.
    pub memory_bytes: Option<u64>,
    /// `IPIngressBytes` (with `IPAccounting`).
    pub ip_in_bytes: Option<u64>,
    /// `IPEgressBytes`.
    pub ip_out_bytes: Option<u64>,
    /// `DeviceAllow` as systemd holds it now (a reload drops rules whose node was missing).
    pub device_allow: Vec<(String, String)>,
}

impl UnitStatus {
    /// Whether nothing of the unit runs any more.
    pub fn has_ended(&self) -> bool {
        matches!(self.active_state.as_str(), "inactive" | "failed")
    }

    /// Whether the unit is `inactive` without its main process having run or failed: so
    /// looks a transient unit whose start job systemd has queued and not yet run.
    pub fn not_started(&self) -> bool {
        self.active_state == "inactive" && self.exec_main_code == 0 && self.result == "success"
    }
}

/// Something systemd announced that the job logic reacts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitEvent {
    /// `Reloading(active)`: a `daemon-reload` began (`true`) or finished (`false`).
    Reloading { active: bool },
    /// A job of systemd's finished (`JobRemoved`); for a start, "done" means started.
    JobRemoved { unit: String, result: String },
    /// A unit's properties changed (`PropertiesChanged` under `/org/freedesktop/systemd1/unit`).
    Changed,
}

/// What the node needs from systemd.
pub trait UnitManager: Send + Sync {
    /// Starts transient service `unit` with `properties`; resolves once systemd accepted the
    /// job (which means started, not finished).
    fn start(
        &self,
        unit: &str,
        properties: &[(&'static str, PropertyValue)],
    ) -> impl Future<Output = Result<(), UnitError>> + Send;

    /// Stops `unit` (all its processes, as `KillMode=control-group` says).
    fn stop(&self, unit: &str) -> impl Future<Output = Result<(), UnitError>> + Send;

    /// The unit's state and accounting; `None` when systemd has no such unit loaded.
    fn status(
        &self,
        unit: &str,
    ) -> impl Future<Output = Result<Option<UnitStatus>, UnitError>> + Send;

    /// Sets runtime properties of a running unit (`SetUnitProperties`, not persisted).
    fn set_properties(
        &self,
        unit: &str,
        properties: &[(&'static str, PropertyValue)],
    ) -> impl Future<Output = Result<(), UnitError>> + Send;

    /// Holds (`RefUnit`) or lets go of (`UnrefUnit`) the unit, so that systemd keeps an ended
    /// unit, and its exit status, until hostd has read it.
    fn hold(&self, unit: &str, held: bool) -> impl Future<Output = Result<(), UnitError>> + Send;

    /// Names of loaded units matching the glob `pattern` (re-adoption after a restart).
    fn list(&self, pattern: &str) -> impl Future<Output = Result<Vec<String>, UnitError>> + Send;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    /// `StartTransientUnit(s name, s mode, a(sv) properties, a(sa(sv)) aux) -> o job`.
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: Vec<(&str, Value<'_>)>,
        aux: Vec<(&str, Vec<(&str, Value<'_>)>)>,
    ) -> zbus::Result<OwnedObjectPath>;

    /// `StopUnit(s name, s mode) -> o job`.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// `GetUnit(s name) -> o unit`; fails with `NoSuchUnit` when it is not loaded.
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    /// `SetUnitProperties(s name, b runtime, a(sv) properties)`.
    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: Vec<(&str, Value<'_>)>,
    ) -> zbus::Result<()>;

    /// `RefUnit(s name)`.
    fn ref_unit(&self, name: &str) -> zbus::Result<()>;

    /// `UnrefUnit(s name)`.
    fn unref_unit(&self, name: &str) -> zbus::Result<()>;

    /// `ListUnitsByPatterns(as states, as patterns) -> a(ssssssouso)`.
    #[allow(clippy::type_complexity)]
    fn list_units_by_patterns(
        &self,
        states: Vec<&str>,
        patterns: Vec<&str>,
    ) -> zbus::Result<
        Vec<(
            String,
            String,
            String,
            String,
            String,
            String,
            OwnedObjectPath,
            u32,
            String,
            OwnedObjectPath,
        )>,
    >;

    /// `Subscribe()`: without it systemd sends no signals to this client.
    fn subscribe(&self) -> zbus::Result<()>;

    /// `Reloading(b active)`.
    #[zbus(signal)]
    fn reloading(&self, active: bool) -> zbus::Result<()>;

    /// `JobRemoved(u id, o job, s unit, s result)`.
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
}

/// A property as the D-Bus value systemd expects.
pub fn to_value(v: &PropertyValue) -> Value<'static> {
    match v {
        PropertyValue::Str(s) => Value::from(s.clone()),
        PropertyValue::Bool(b) => Value::from(*b),
        PropertyValue::U64(n) => Value::from(*n),
        PropertyValue::U32(n) => Value::from(*n),
        PropertyValue::I32(n) => Value::from(*n),
        PropertyValue::Strings(v) => Value::from(v.clone()),
        PropertyValue::Devices(d) => Value::from(d.clone()),
        PropertyValue::FlaggedList(b, names) => Value::from((*b, names.clone())),
        PropertyValue::Exec(e) => Value::from(e.clone()),
        PropertyValue::Binds(b) => Value::from(b.clone()),
        PropertyValue::Prefixes(p) => Value::from(p.clone()),
    }
}

/// systemd, reached over a D-Bus connection (the system bus on a node; the container's bus in
/// dev mode and tests).
#[derive(Debug, Clone)]
pub struct Systemd {
    conn: zbus::Connection,
    manager: ManagerProxy<'static>,
}

impl Systemd {
    /// Connects to the bus at `address` (e.g. `unix:path=/run/dbus/system_bus_socket`).
    pub async fn connect(address: &str) -> Result<Systemd, UnitError> {
        let err = |source| UnitError::Connect {
            address: address.to_owned(),
            source,
        };
        let conn = zbus::connection::Builder::address(address)
            .map_err(err)?
            .build()
            .await
            .map_err(err)?;
        let manager = ManagerProxy::new(&conn).await.map_err(err)?;
        Ok(Systemd { conn, manager })
    }

    /// Subscribes to systemd's signals and forwards the ones the job logic needs. The channel
    /// closes when the bus connection ends (systemd gone), which the caller must treat as
    /// "jobs are no longer watched".
    pub async fn events(&self) -> Result<tokio::sync::mpsc::Receiver<UnitEvent>, UnitError> {
        let call = |call, source| UnitError::Call {
            call,
            unit: String::new(),
            source,
        };
        self.manager
            .subscribe()
            .await
            .map_err(|e| call("Subscribe", e))?;
        let reloading = self
            .manager
            .receive_reloading()
            .await
            .map_err(|e| call("Reloading", e))?;
        let removed = self
            .manager
            .receive_job_removed()
            .await
            .map_err(|e| call("JobRemoved", e))?;
        let changed = self
            .properties_changed()
            .await
            .map_err(|e| call("PropertiesChanged", e))?;
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        tokio::spawn(forward_events(reloading, removed, changed, tx));
        Ok(rx)
    }

    async fn properties_changed(&self) -> zbus::Result<zbus::MessageStream> {
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface("org.freedesktop.DBus.Properties")?
            .member("PropertiesChanged")?
            .path_namespace("/org/freedesktop/systemd1/unit")?
            .build();
        zbus::MessageStream::for_match_rule(rule, &self.conn, Some(256)).await
    }

    async fn all_properties(
        &self,
        path: &OwnedObjectPath,
        interface: &'static str,
    ) -> zbus::Result<std::collections::HashMap<String, OwnedValue>> {
        let props = zbus::fdo::PropertiesProxy::builder(&self.conn)
            .destination("org.freedesktop.systemd1")?
            .path(path.clone())?
            .build()
            .await?;
        let iface = zbus::names::InterfaceName::try_from(interface)?;
        Ok(props.get_all(iface).await?)
    }
}

/// Forwards signals until the bus or the receiver goes away. Bursts (a reload storm) are
/// coalesced by the bounded channel: a full channel drops `Changed`, never `Reloading`.
async fn forward_events(
    mut reloading: ReloadingStream,
    mut removed: JobRemovedStream,
    mut changed: zbus::MessageStream,
    tx: tokio::sync::mpsc::Sender<UnitEvent>,
) {
    use futures_util::StreamExt;
    loop {
        let event = tokio::select! {
            Some(s) = reloading.next() => match s.args() {
                Ok(a) => UnitEvent::Reloading { active: a.active },
                Err(_) => continue,
            },
            Some(s) = removed.next() => match s.args() {
                Ok(a) => UnitEvent::JobRemoved { unit: a.unit, result: a.result },
                Err(_) => continue,
            },
            Some(_) = changed.next() => {
                let _ = tx.try_send(UnitEvent::Changed);
                continue;
            }
            else => return,
        };
        if tx.send(event).await.is_err() {
            return;
        }
    }
}

fn u64_prop(p: &std::collections::HashMap<String, OwnedValue>, name: &str) -> Option<u64> {
    p.get(name)
        .and_then(|v| u64::try_from(v).ok())
        .filter(|n| *n != u64::MAX)
}

fn i32_prop(p: &std::collections::HashMap<String, OwnedValue>, name: &str) -> i32 {
    p.get(name).and_then(|v| i32::try_from(v).ok()).unwrap_or(0)
}

fn str_prop(p: &std::collections::HashMap<String, OwnedValue>, name: &str) -> String {
    p.get(name)
        .and_then(|v| String::try_from(v.try_clone().ok()?).ok())
        .unwrap_or_default()
}

fn devices_prop(p: &std::collections::HashMap<String, OwnedValue>) -> Vec<(String, String)> {
    p.get("DeviceAllow")
        .and_then(|v| <Vec<(String, String)>>::try_from(v.try_clone().ok()?).ok())
        .unwrap_or_default()
}

fn is_no_such_unit(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _)
        if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit")
}

impl UnitManager for Systemd {
    async fn start(
        &self,
        unit: &str,
        properties: &[(&'static str, PropertyValue)],
    ) -> Result<(), UnitError> {
        let props: Vec<(&str, Value<'_>)> =
            properties.iter().map(|(k, v)| (*k, to_value(v))).collect();
        self.manager
            .start_transient_unit(unit, "fail", props, Vec::new())
            .await
            .map(drop)
            .map_err(|source| UnitError::StartRefused {
                unit: unit.to_owned(),
                source,
            })
    }

    async fn stop(&self, unit: &str) -> Result<(), UnitError> {
        self.manager
            .stop_unit(unit, "replace")
            .await
            .map(drop)
            .map_err(|source| UnitError::StopRefused {
                unit: unit.to_owned(),
                source,
            })
    }

    async fn status(&self, unit: &str) -> Result<Option<UnitStatus>, UnitError> {
        let call = |call, source| UnitError::Call {
            call,
            unit: unit.to_owned(),
            source,
        };
        let path = match self.manager.get_unit(unit).await {
            Ok(p) => p,
            Err(e) if is_no_such_unit(&e) => return Ok(None),
            Err(e) => return Err(call("GetUnit", e)),
        };
        let u = self
            .all_properties(&path, "org.freedesktop.systemd1.Unit")
            .await
            .map_err(|e| call("Unit properties", e))?;
        let s = self
            .all_properties(&path, "org.freedesktop.systemd1.Service")
            .await
            .map_err(|e| call("Service properties", e))?;
        Ok(Some(UnitStatus {
            active_state: str_prop(&u, "ActiveState"),
            result: str_prop(&s, "Result"),
            exec_main_code: i32_prop(&s, "ExecMainCode"),
            exec_main_status: i32_prop(&s, "ExecMainStatus"),
            cpu_ns: u64_prop(&s, "CPUUsageNSec"),
            memory_bytes: u64_prop(&s, "MemoryCurrent"),
            ip_in_bytes: u64_prop(&s, "IPIngressBytes"),
            ip_out_bytes: u64_prop(&s, "IPEgressBytes"),
            device_allow: devices_prop(&s),
        }))
    }

    async fn set_properties(
        &self,
        unit: &str,
        properties: &[(&'static str, PropertyValue)],
    ) -> Result<(), UnitError> {
        let props: Vec<(&str, Value<'_>)> =
            properties.iter().map(|(k, v)| (*k, to_value(v))).collect();
        self.manager
            .set_unit_properties(unit, true, props)
            .await
            .map_err(|source| UnitError::Call {
                call: "SetUnitProperties",
                unit: unit.to_owned(),
                source,
            })
    }

    async fn hold(&self, unit: &str, held: bool) -> Result<(), UnitError> {
        let (call, r) = if held {
            ("RefUnit", self.manager.ref_unit(unit).await)
        } else {
            ("UnrefUnit", self.manager.unref_unit(unit).await)
        };
        r.map_err(|source| UnitError::Call {
            call,
            unit: unit.to_owned(),
            source,
        })
    }

    async fn list(&self, pattern: &str) -> Result<Vec<String>, UnitError> {
        let units = self
            .manager
            .list_units_by_patterns(Vec::new(), vec![pattern])
            .await
            .map_err(|source| UnitError::Call {
                call: "ListUnitsByPatterns",
                unit: pattern.to_owned(),
                source,
            })?;
        Ok(units.into_iter().map(|u| u.0).collect())
    }
}
