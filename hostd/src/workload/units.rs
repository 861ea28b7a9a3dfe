//! Starting and stopping units over systemd's D-Bus API (`org.freedesktop.systemd1`).
//!
//! [`UnitManager`] is the one side-effecting interface of the workload area: the job logic
//! above it is plain code, and tests drive it against a fake systemd that speaks the same
//! D-Bus interface on a private bus. [`Systemd`] is the real adapter, with hand-written zbus
//! proxies for the few calls it makes (types as systemd 252 introspects them).

use super::sandbox::PropertyValue;
use std::future::Future;
use zbus::zvariant::{OwnedObjectPath, Value};

/// Why systemd did not do what was asked. Messages are for the operator's log; clients get a
/// generic answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    #[error("cannot reach systemd's bus at {address}: {source}")]
    Connect {
        address: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd refused to start {unit}: {source}")]
    StartRefused {
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd refused to stop {unit}: {source}")]
    StopRefused {
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("property {name} cannot be sent: {reason}")]
    BadProperty { name: String, reason: String },
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
    }
}

/// systemd, reached over a D-Bus connection (the system bus on a node; the container's bus in
/// dev mode and tests).
#[derive(Debug, Clone)]
pub struct Systemd {
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
        Ok(Systemd { manager })
    }
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
}
